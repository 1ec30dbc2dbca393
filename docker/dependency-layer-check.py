#!/usr/bin/env python3
"""Rebuild docker/Dockerfile's dependency layer on the host and load it with cargo; no container
engine is used.

    python3 docker/dependency-layer-check.py [--dockerfile FILE] [--dockerignore FILE]

(docker/check.sh runs it.) The builder stage's COPY instructions up to its first RUN are
carried out from the build context (the repository root), filtered by the context's ignore file
as BuildKit filters it (docker/Dockerfile.dockerignore when there is one, else .dockerignore),
into an empty folder that stands for the stage's WORKDIR. A COPY source that is missing or
ignored fails, as it fails `docker build`. That RUN's script then runs there with `sh`, its
`cargo build ...` replaced by

    cargo metadata --locked --offline --format-version 1 --filter-platform <host>

which loads every workspace member's manifest and resolves Cargo.lock without building
anything (--filter-platform: only the host's dependencies need to be in the local cargo cache,
which any build of the workspace has filled). A member whose Cargo.toml the layer lacks fails
there as `cargo build` fails in the image ("failed to load manifest for workspace member").
Last, every bench, example, test and binary target a member's manifest names, and its [lib]
when it has one, must have its source file in the stubbed workspace.

Python 3.11 standard library only; needs cargo and rustc on PATH.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


class CheckError(Exception):
    pass


def instructions(text: str) -> list[tuple[str, str]]:
    """The Dockerfile's instructions as (KEYWORD, arguments), continuation lines joined and
    comment lines dropped (the default escape character, a backslash)."""
    out, current = [], ""
    for line in text.split("\n"):
        stripped = line.strip()
        if stripped.startswith("#") or stripped == "":
            continue  # a comment, parser directive or empty line, also inside a continuation
        if line.rstrip().endswith("\\"):
            current += line.rstrip()[:-1]
            continue
        current += line
        if current.strip():
            keyword, _, args = current.strip().partition(" ")
            out.append((keyword.upper(), args.strip()))
        current = ""
    if current.strip():
        raise CheckError("the Dockerfile ends inside a continued instruction")
    return out


# .dockerignore, as github.com/moby/patternmatcher reads and matches it.
def ignore_patterns(text: str) -> list[tuple[bool, re.Pattern[str]]]:
    patterns = []
    for line in text.split("\n"):
        if line.startswith("#"):
            continue
        line = line.strip()
        if not line:
            continue
        exception = line.startswith("!")
        if exception:
            line = line[1:].strip()
        line = os.path.normpath(line) if line else line
        if len(line) > 1 and line.startswith("/"):
            line = line[1:]
        patterns.append((exception, re.compile(pattern_regex(line))))
    return patterns


def pattern_regex(pattern: str) -> str:
    out, i = "^", 0
    while i < len(pattern):
        ch = pattern[i]
        i += 1
        if ch == "*":
            if i < len(pattern) and pattern[i] == "*":
                i += 1
                if i < len(pattern) and pattern[i] == "/":
                    i += 1
                out += ".*" if i == len(pattern) else "(.*/)?"
            else:
                out += "[^/]*"
        elif ch == "?":
            out += "[^/]"
        elif ch in ".+()|{}$":
            out += "\\" + ch
        elif ch == "\\" and i < len(pattern):
            out += re.escape(pattern[i])
            i += 1
        else:
            out += ch
    return out + "$"


def ignored(patterns: list[tuple[bool, re.Pattern[str]]], path: str) -> bool:
    """Whether the context path (relative, with /) is left out of the build context."""
    matched = False
    parent = os.path.dirname(path)
    parents = parent.split("/") if parent else []
    for exception, regex in patterns:
        if exception != matched:
            continue  # an exclusion of what is already out, or an exception for what is in
        match = bool(regex.match(path)) or any(
            regex.match("/".join(parents[: i + 1])) for i in range(len(parents)))
        if match:
            matched = not exception
    return matched


def copy_instruction(args: str, patterns, workdir: Path) -> list[str]:
    """Carry out a COPY from the build context into `workdir`; returns what it copied."""
    if args.startswith("["):
        words = json.loads(args)
    else:
        words = shlex.split(args)
    flags = [w for w in words if w.startswith("--")]
    if any(f.startswith("--from") for f in flags):
        raise CheckError(f"COPY {args}: --from in the dependency layer is not supported by this check")
    words = [w for w in words if not w.startswith("--")]
    if len(words) < 2:
        raise CheckError(f"COPY {args}: no source or destination")
    *sources, dest = words
    to_dir = dest.endswith("/") or len(sources) > 1
    dest_path = workdir / dest.lstrip("/")
    copied = []
    for source in sources:
        source = os.path.normpath(source.lstrip("/"))
        matches = sorted(glob.glob(source, root_dir=ROOT)) if glob.has_magic(source) else [source]
        matches = [m for m in matches if (ROOT / m).exists() and not ignored(patterns, m)]
        if not matches:
            raise CheckError(f"COPY {args}: {source} is not in the build context (missing, or left out "
                             "by the ignore file): `docker build` fails here")
        for m in matches:
            src = ROOT / m
            if src.is_dir():
                for base, _dirs, files in os.walk(src):
                    for name in files:
                        rel = os.path.relpath(os.path.join(base, name), ROOT)
                        if not ignored(patterns, rel):
                            target = dest_path / os.path.relpath(os.path.join(base, name), src)
                            target.parent.mkdir(parents=True, exist_ok=True)
                            shutil.copyfile(os.path.join(base, name), target)
                            copied.append(rel)
            else:
                target = dest_path / src.name if to_dir else dest_path
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(src, target)
                copied.append(m)
    return copied


def target_files(package: dict) -> list[str]:
    """Problems: targets the package's manifest names whose source file is missing."""
    manifest = Path(package["manifest_path"])
    pkg_dir = manifest.parent
    toml = tomllib.loads(manifest.read_text())
    problems = []
    if "lib" in toml:
        path = toml["lib"].get("path", "src/lib.rs")
        if not (pkg_dir / path).is_file():
            problems.append(f"{package['name']}: [lib] has no {path}")
    dirs = {"bench": "benches", "example": "examples", "test": "tests", "bin": "src/bin"}
    for kind, folder in dirs.items():
        for target in toml.get(kind, []):
            name = target.get("name", "?")
            if "path" in target:
                candidates = [target["path"]]
            else:
                candidates = [f"{folder}/{name}.rs", f"{folder}/{name}/main.rs"]
                if kind == "bin":
                    candidates.append("src/main.rs")
            if not any((pkg_dir / c).is_file() for c in candidates):
                problems.append(f"{package['name']}: [[{kind}]] {name} has none of {candidates}")
    return problems


def host_triple() -> str:
    out = subprocess.run(["rustc", "-vV"], capture_output=True, text=True, check=True).stdout
    (host,) = [line.split(":", 1)[1].strip() for line in out.splitlines() if line.startswith("host:")]
    return host


def check(dockerfile: Path, dockerignore: Path | None) -> str:
    steps = instructions(dockerfile.read_text())
    patterns = ignore_patterns(dockerignore.read_text()) if dockerignore else []
    froms = [i for i, (k, _) in enumerate(steps) if k == "FROM"]
    if not froms:
        raise CheckError("no FROM")
    stage = steps[froms[0] + 1:(froms[1] if len(froms) > 1 else len(steps))]
    with tempfile.TemporaryDirectory(prefix="truthscale-dependency-layer.") as tmp:
        root = Path(tmp) / "fs"
        workdir = root
        copied = []
        script = None
        for keyword, args in stage:
            if keyword == "WORKDIR":
                workdir = root / args.lstrip("/")
                workdir.mkdir(parents=True, exist_ok=True)
            elif keyword == "COPY":
                copied += copy_instruction(args, patterns, workdir)
            elif keyword == "ADD":
                raise CheckError(f"ADD {args}: not supported by this check; use COPY")
            elif keyword == "RUN":
                script = args
                break
        if script is None:
            raise CheckError("the builder stage has no RUN after its COPY lines")
        builds = re.findall(r"cargo build[^&;|]*", script)
        if len(builds) != 1:
            raise CheckError(f"the dependency layer's RUN has {len(builds)} `cargo build` commands, want 1")
        metadata_json = Path(tmp) / "metadata.json"
        metadata = ("cargo metadata --locked --offline --format-version 1 --filter-platform "
                    f"{shlex.quote(host_triple())} > {shlex.quote(str(metadata_json))}")
        script = script.replace(builds[0], metadata + " ")
        run = subprocess.run(["sh", "-c", script], cwd=workdir, capture_output=True, text=True)
        if run.returncode != 0:
            raise CheckError(f"the dependency layer's RUN (cargo build replaced by cargo metadata) failed "
                             f"with exit status {run.returncode}:\n{(run.stdout + run.stderr).strip()}")
        meta = json.loads(metadata_json.read_text())
        members = set(meta["workspace_members"])
        packages = [p for p in meta["packages"] if p["id"] in members]
        problems = [p for pkg in packages for p in target_files(pkg)]
        if problems:
            raise CheckError("targets without a source file in the stubbed workspace:\n  " + "\n  ".join(problems))
        names = sorted(os.path.relpath(Path(p["manifest_path"]).parent, workdir) for p in packages)
        return (f"{len(copied)} files copied from the context ({', '.join(copied)}); the stubbed workspace "
                f"loads with cargo metadata --locked: {len(names)} members ({', '.join(names)})")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dockerfile", type=Path, default=ROOT / "docker" / "Dockerfile")
    parser.add_argument("--dockerignore", type=Path,
                        help="the build context's ignore file (default: <dockerfile>.dockerignore "
                             "when it exists, else .dockerignore at the repository root)")
    args = parser.parse_args()
    ignore = args.dockerignore
    if ignore is None:
        for candidate in (Path(f"{args.dockerfile}.dockerignore"), ROOT / ".dockerignore"):
            if candidate.is_file():
                ignore = candidate
                break
    path = args.dockerfile.resolve()
    name = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    try:
        print(f"dependency layer of {name}: {check(args.dockerfile, ignore)}")
    except (CheckError, OSError, subprocess.CalledProcessError, ValueError) as e:
        print(f"dependency layer of {name}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
