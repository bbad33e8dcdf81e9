"""The incremental learning example on S3, for `make run S3=1` (examples/devrun.py --s3).

Starts the S3 server the tests use (SeaweedFS, built by `make s3-server`; devcluster/s3server.py
runs it on free loopback ports with one generated identity), fills a bucket with what
upstream's helmet detection example reads (its Dataset's index, the initial and deploy
models), and rewrites the example so that its Dataset, its Models and its outputDir are
`s3://` URLs in that bucket, every one with `credentialName` naming one Secret that holds
the server's endpoint and keys. The GM turns the Secret into the `sedna.io/credential`
annotation of the objects it sends the LCs, and into the S3 env of the worker pods: the LC
counts the index in the bucket and writes the samples and `dataIndex.txt` there, the
simulated train worker PUTs its model there, and the hot update copies it over the deploy
Model on the server.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import yaml
from aiobotocore.session import get_session

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "upstream" / "incremental-learning-helmet-detection.yaml"
BUCKET = "sedna-examples"
SECRET = "s3-secret"
SAMPLES = 700  # more than 500 train samples at trainProb 0.8: the train trigger fires at once
INDEX_KEY = "helmet_detection/train_data/train_data.txt"
OBJECTS = {INDEX_KEY: "".join(f"images/{i}.jpg labels/{i}.txt\n" for i in range(SAMPLES)).encode(),
           "models/base_model/model.ckpt": b"base model\n",
           "models/deploy_model/saved_model.pb": b"deployed model\n"}


@contextlib.asynccontextmanager
async def s3_server() -> AsyncIterator[Any]:
    """A running SeaweedFS S3 server (devcluster/s3server.py) until the block ends."""
    from devcluster.s3server import seaweedfs  # the binary, ports and identity
    server = seaweedfs()
    endpoint = await asyncio.to_thread(server.__enter__)
    try:
        yield endpoint
    finally:
        await asyncio.to_thread(server.__exit__, None, None, None)


def secret(endpoint: Any, namespace: str = "default") -> dict[str, Any]:
    """The Secret upstream's S3 examples use: endpoint in annotations, keys in data."""
    return {"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": SECRET, "namespace": namespace,
                         "annotations": {"s3-endpoint": endpoint.endpoint, "s3-usehttps": "0"}},
            "stringData": {"ACCESS_KEY_ID": endpoint.access_key, "SECRET_ACCESS_KEY": endpoint.secret_key}}


def on_s3(docs: list[dict[str, Any]], endpoint: Any, bucket: str = BUCKET) -> list[dict[str, Any]]:
    """The example's documents (changed in place) with its Dataset, Models and outputDir in
    `bucket`, and the Secret first."""
    for doc in docs:
        _clock_strings(doc)
    urls = {"Dataset": f"s3://{bucket}/{INDEX_KEY}",
            "initial-model": f"s3://{bucket}/models/base_model/model.ckpt",
            "deploy-model": f"s3://{bucket}/models/deploy_model/saved_model.pb"}
    for doc in docs:
        key = doc["kind"] if doc["kind"] == "Dataset" else doc["metadata"]["name"]
        if key in urls:
            doc["spec"]["url"] = urls[key]
        doc["spec"]["credentialName"] = SECRET
        if doc["kind"] == "IncrementalLearningJob":
            doc["spec"]["outputDir"] = f"s3://{bucket}/output"
    return [secret(endpoint), *docs]


def _clock_strings(node: Any) -> None:
    """Timer times back to `HH:MM` strings: PyYAML reads the example's unquoted `02:00` as
    the YAML 1.1 base-60 integer 120, where Kubernetes' reader keeps the string."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("start", "end") and isinstance(value, int) and not isinstance(value, bool):
                node[key] = f"{value // 60:02d}:{value % 60:02d}"
            else:
                _clock_strings(value)
    elif isinstance(node, list):
        for item in node:
            _clock_strings(item)


async def fill(endpoint: Any, bucket: str = BUCKET) -> None:
    """Create `bucket` (if needed) with the example's index and models."""
    async with get_session().create_client(
            "s3", endpoint_url=endpoint.url, region_name="us-east-1", aws_access_key_id=endpoint.access_key,
            aws_secret_access_key=endpoint.secret_key) as client:
        with contextlib.suppress(client.exceptions.BucketAlreadyOwnedByYou):
            await client.create_bucket(Bucket=bucket)
        for key, body in OBJECTS.items():
            await client.put_object(Bucket=bucket, Key=key, Body=body)


async def manifest(endpoint: Any, directory: Path) -> Path:
    """Fill the bucket and write the example on S3 into `directory`; its path."""
    await fill(endpoint)
    return write_manifest(endpoint, directory)


def write_manifest(endpoint: Any, directory: Path) -> Path:
    """The example on S3 written into `directory` (readable by its owner only: it holds the
    server's keys); its path."""
    docs = [d for d in yaml.safe_load_all(EXAMPLE.read_text(encoding="utf-8")) if d]
    path = directory / "incremental-learning-helmet-detection-s3.yaml"
    directory.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with open(fd, "w", encoding="utf-8") as f:
        f.write(yaml.safe_dump_all(on_s3(docs, endpoint)))
    return path
