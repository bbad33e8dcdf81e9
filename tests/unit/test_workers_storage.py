"""gm.workers.storage: URLs -> env, volumes, mounts and the storage-initializer."""

from __future__ import annotations

import base64

import pytest

from gm.workers.specerrors import InvalidSpec
from gm.workers.storage import (
    MountURL,
    WorkerMount,
    k8s_valid_name,
    plan_storage,
    s3_env_from_secret,
)

IMAGE = "kubeedge/sedna-storage-initializer:v0.3.0"


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


MINIO = {
    "apiVersion": "v1", "kind": "Secret",
    "metadata": {"name": "mysecret", "namespace": "default",
                 "annotations": {"s3-endpoint": "minio.sedna:9000", "s3-usehttps": "0"}},
    "data": {"ACCESS_KEY_ID": b64("minioadmin"), "SECRET_ACCESS_KEY": b64("minio-secret")},
}


def plan(*mounts: WorkerMount):
    return plan_storage(list(mounts), image=IMAGE, pull_policy="IfNotPresent")


def test_s3_download_goes_through_init_container_with_credentials():
    p = plan(WorkerMount(env_name="MODEL_URL", urls=(
        MountURL(url="s3://bkt/m/model.pb", secret=MINIO),)))
    assert p.env == (("MODEL_URL", "/downloads/bkt/m/model.pb"),)
    assert p.worker_env == ()
    assert p.volumes == ({"name": "sedna-storage-initializer", "emptyDir": {}},)
    assert p.worker_mounts == ({"name": "sedna-storage-initializer", "mountPath": "/downloads",
                                "readOnly": True},)
    assert p.init_container == {
        "name": "storage-initializer",
        "image": IMAGE,
        "imagePullPolicy": "IfNotPresent",
        "args": ["s3://bkt/m/model.pb", "/downloads/bkt/m/"],
        "env": [{"name": "S3_ENDPOINT_URL", "value": "http://minio.sedna:9000"},
                {"name": "ACCESS_KEY_ID", "value": "minioadmin"},
                {"name": "SECRET_ACCESS_KEY", "value": "minio-secret"},
                {"name": "INDIRECT_URL_MARK", "value": "@"}],
        "resources": {"limits": {"cpu": "1", "memory": "1Gi"}},
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "volumeMounts": [{"name": "sedna-storage-initializer", "mountPath": "/downloads"}],
    }


def test_local_file_is_a_host_path_mount_of_its_directory():
    p = plan(WorkerMount(env_name="TRAIN_DATASET_URL", urls=(MountURL(url="/data/ds/train.txt"),)))
    assert p.env == (("TRAIN_DATASET_URL", "/home/data/data/ds/train.txt"),)
    assert p.worker_env == (("DATA_PATH_PREFIX", "/home/data"),)
    assert p.volumes == ({"name": "data-dsz",
                          "hostPath": {"path": "/data/ds/", "type": "Directory"}},)
    assert p.worker_mounts == ({"name": "data-dsz", "mountPath": "/home/data/data/ds/"},)
    assert p.init_container is None


def test_entry_directly_under_root_is_mounted_itself_not_the_host_root():
    p = plan(WorkerMount(env_name="MODEL_URL", urls=(MountURL(url="/model"),)))
    assert p.env == (("MODEL_URL", "/home/data/model"),)
    assert p.volumes == ({"name": "model", "hostPath": {"path": "/model"}},)
    assert p.worker_mounts == ({"name": "model", "mountPath": "/home/data/model"},)


def test_s3_without_download_keeps_url_and_gives_workers_the_credentials():
    p = plan(WorkerMount(env_name="AGG_DATA_PATH", urls=(
        MountURL(url="s3://kubeedge/sedna/fl/", download=False, secret=MINIO),)))
    assert p.env == (("AGG_DATA_PATH", "s3://kubeedge/sedna/fl/"),)
    assert p.init_container is None and p.volumes == () and p.worker_mounts == ()
    assert p.worker_env == (("S3_ENDPOINT_URL", "http://minio.sedna:9000"),
                            ("ACCESS_KEY_ID", "minioadmin"),
                            ("SECRET_ACCESS_KEY", "minio-secret"))


def test_several_urls_join_with_semicolon_and_share_volumes():
    p = plan(WorkerMount(env_name="MODEL_URLS", urls=(
        MountURL(url="/models/a/1.pb"), MountURL(url="/models/a/2.pb"),
        MountURL(url="https://example.com/m/3.pb"))))
    assert p.value("MODEL_URLS") == (
        "/home/data/models/a/1.pb;/home/data/models/a/2.pb;/downloads/example.com/m/3.pb")
    assert [v["name"] for v in p.volumes] == ["sedna-storage-initializer", "models-az"]
    assert [m["mountPath"] for m in p.worker_mounts] == ["/downloads", "/home/data/models/a/"]


def test_indirect_local_index_is_read_by_the_initializer_only():
    p = plan(WorkerMount(env_name="TRAIN_DATASET_URL", urls=(
        MountURL(url="/data/helmet/train_index.txt", indirect=True),)))
    assert p.env == (("TRAIN_DATASET_URL", "/downloads/data/helmet/train_index.txt"),)
    assert p.init_container["args"] == ["/home/data/data/helmet/train_index.txt",
                                        "@/downloads/data/helmet/"]
    assert p.init_container["volumeMounts"] == [
        {"name": "sedna-storage-initializer", "mountPath": "/downloads"},
        {"name": "data-helmetz", "mountPath": "/home/data/data/helmet/"}]
    assert p.worker_mounts == ({"name": "sedna-storage-initializer", "mountPath": "/downloads",
                                "readOnly": True},)
    assert p.worker_env == ()


def test_unknown_scheme_passes_url_through():
    p = plan(WorkerMount(env_name="MODEL_URL", urls=(MountURL(url="hdfs://nn/m.pb"),)))
    assert p.env == (("MODEL_URL", "hdfs://nn/m.pb"),)
    assert p.init_container is None and p.volumes == ()


def test_colliding_volume_names_stay_distinct():
    p = plan(WorkerMount(env_name="A", urls=(MountURL(url="/a_b/x.txt"),)),
             WorkerMount(env_name="B", urls=(MountURL(url="/a-b/y.txt"),)))
    names = [v["name"] for v in p.volumes]
    assert names[0] == "a-bz" and names[1].startswith("a-bz-") and len(set(names)) == 2


@pytest.mark.parametrize("text,expected", [
    pytest.param("/data/ds/", "data-dsz", id="trailing-slash"),
    pytest.param("/Data/My_Set", "data-my-set", id="case-and-underscore"),
    pytest.param("/", "sedna-default-volume-name", id="root"),
    pytest.param("/" + "x" * 80, "x" * 63, id="truncated"),
])
def test_k8s_valid_name(text, expected):
    assert k8s_valid_name(text) == expected


@pytest.mark.parametrize("url,match", [
    pytest.param("", "empty", id="empty"),
    pytest.param("data/x.txt", "must be absolute", id="relative"),
    pytest.param("/", "host root", id="root"),
])
def test_bad_urls_are_invalid_spec(url, match):
    with pytest.raises(InvalidSpec, match=match) as info:
        plan(WorkerMount(env_name="MODEL_URL", urls=(MountURL(url=url),)))
    assert info.value.reason == "InvalidURL"


def test_https_is_default_and_missing_endpoint_or_key_is_an_error():
    secret = {"metadata": {"name": "s", "annotations": {"s3-endpoint": "s3.example.com"}},
              "stringData": {"ACCESS_KEY_ID": "ak", "SECRET_ACCESS_KEY": "sk"}}
    assert s3_env_from_secret(secret)[0] == ("S3_ENDPOINT_URL", "https://s3.example.com")
    with pytest.raises(InvalidSpec, match="Secret s has no s3-endpoint annotation"):
        s3_env_from_secret({"metadata": {"name": "s"}, "data": MINIO["data"]})
    no_key = {"metadata": MINIO["metadata"], "data": {"ACCESS_KEY_ID": b64("x")}}
    with pytest.raises(InvalidSpec, match="Secret mysecret has no data.SECRET_ACCESS_KEY"):
        s3_env_from_secret(no_key)
    bad = {"metadata": MINIO["metadata"],
           "data": {"ACCESS_KEY_ID": "***", "SECRET_ACCESS_KEY": b64("x")}}
    with pytest.raises(InvalidSpec, match="not base64"):
        s3_env_from_secret(bad)


def test_secret_is_not_consulted_for_local_or_http_urls():
    broken = {"metadata": {"name": "broken"}}
    p = plan(WorkerMount(env_name="MODEL_URL", urls=(
        MountURL(url="http://models.local/m.pb", secret=broken),)))
    assert p.init_container["env"] == [{"name": "INDIRECT_URL_MARK", "value": "@"}]
