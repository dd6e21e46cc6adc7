"""Builds airlock-sdk: the gRPC stubs of Airlock's public API are generated
here, from the repository's ``proto/airlock/api/v1/*.proto``, never kept in
the source tree.

``build_py`` runs grpcio-tools' protoc with four outputs into the build
directory: the messages (``*_pb2.py``), the service stubs
(``*_pb2_grpc.py``), and mypy-protobuf's type stubs for both (``*.pyi``),
as the package ``airlock.api.v1``. The runtime requirements name at least
the grpcio and protobuf versions that generated the code, which that code
checks when it is imported.
"""

from __future__ import annotations

import stat
import sys
import tempfile
from pathlib import Path
from typing import List

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

HERE = Path(__file__).resolve().parent
# The repository's protos; an sdist carries a copy under proto/.
PROTO_ROOTS = [HERE.parent.parent / "proto", HERE / "proto"]
API_DIR = Path("airlock") / "api" / "v1"

PACKAGE_DOCS = {
    Path("airlock") / "api": "Airlock's public API as generated protobuf and gRPC code.",
    API_DIR: (
        "``airlock.api.v1``, generated at build time from proto/airlock/api/v1: "
        "messages (``*_pb2``) and service stubs (``*_pb2_grpc``)."
    ),
}


def proto_root() -> Path:
    for root in PROTO_ROOTS:
        if (root / API_DIR).is_dir():
            return root
    raise SystemExit(
        "airlock-sdk: proto/airlock/api/v1 not found; build from the Airlock "
        "repository (pip install ./sdk/python) or from its sdist"
    )


def protos(root: Path) -> List[str]:
    found = sorted(str(p.relative_to(root)) for p in (root / API_DIR).glob("*.proto"))
    if not found:
        raise SystemExit(f"airlock-sdk: no .proto files in {root / API_DIR}")
    return found


def plugin(directory: Path, name: str, function: str) -> str:
    """A protoc plugin that runs mypy-protobuf's `function` in this Python."""
    path = directory / name
    path.write_text(
        f'#!/bin/sh\nexec "{sys.executable}" -c '
        f'"from mypy_protobuf.main import {function}; {function}()"\n'
    )
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return f"--plugin={name}={path}"


def generate(out: Path) -> None:
    """Writes airlock/api/v1 under `out`."""
    import grpc_tools
    from grpc_tools import protoc

    root = proto_root()
    out.mkdir(parents=True, exist_ok=True)
    well_known = Path(grpc_tools.__file__).parent / "_proto"
    with tempfile.TemporaryDirectory() as scratch:
        args = [
            "grpc_tools.protoc",
            f"-I{root}",
            f"-I{well_known}",
            f"--python_out={out}",
            f"--grpc_python_out={out}",
            f"--mypy_out={out}",
            f"--mypy_grpc_out={out}",
            plugin(Path(scratch), "protoc-gen-mypy", "main"),
            plugin(Path(scratch), "protoc-gen-mypy_grpc", "grpc"),
            *protos(root),
        ]
        if protoc.main(args) != 0:
            raise SystemExit("airlock-sdk: protoc failed on proto/airlock/api/v1")
    for package, doc in PACKAGE_DOCS.items():
        (out / package / "__init__.py").write_text(f'"""{doc}"""\n')


def requirements() -> List[str]:
    """What the generated code needs at run time: at least the versions of
    grpcio and protobuf that generated it (the same major protobuf)."""
    import grpc
    import google.protobuf

    protobuf = google.protobuf.__version__
    major = int(protobuf.split(".")[0])
    return [
        f"grpcio>={grpc.__version__}",
        f"protobuf>={protobuf},<{major + 1}",
        "typing_extensions>=4.5",
    ]


class BuildWithStubs(build_py):
    def run(self) -> None:
        generate(Path(self.build_lib))
        super().run()


class SdistWithProtos(sdist):
    """An sdist carries the protos it is built from."""

    def make_release_tree(self, base_dir: str, files: List[str]) -> None:
        super().make_release_tree(base_dir, files)
        root = proto_root()
        for name in protos(root):
            target = Path(base_dir) / "proto" / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes((root / name).read_bytes())


setup(
    install_requires=requirements(),
    cmdclass={"build_py": BuildWithStubs, "sdist": SdistWithProtos},
)

