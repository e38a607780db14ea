#!/usr/bin/env python3
"""Repack a wheel without the files a benchmark never opens (stdlib only, deterministic).

    repack_wheel.py SRC.whl OUTDIR --local wamcore.bench [--trim PREFIX ...] [--drop PREFIX ...]
                    [--keep-list FILE] [--note TEXT]

* ``--trim PREFIX``: members under PREFIX are dropped unless listed in ``--keep-list``
  (one member path per line, ``#`` comments; lines for other wheels are ignored);
* ``--drop PREFIX``: members under PREFIX are dropped unconditionally;
* everything else (code, metadata) is kept as it is.

The result is a valid wheel of version ``VERSION+LOCAL`` (a PEP 440 local version, so
``==VERSION`` pins in other wheels' Requires-Dist still match): the ``.dist-info`` folder is
renamed, ``Version:`` rewritten, a note prepended to ``Summary:``, and ``RECORD`` regenerated
with fresh sha256 hashes. Zip entries get a fixed timestamp, so the same input gives the same
bytes (bench/device/make_wheelhouse.sh relies on that to be idempotent).
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import re
import sys
import zipfile
from pathlib import Path

FIXED_TIME = (1980, 1, 1, 0, 0, 0)


def read_keep_list(path: Path | None) -> set:
    if path is None:
        return set()
    keep = set()
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            keep.add(line)
    return keep


def record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode("ascii")


def repack(src: Path, outdir: Path, local: str, trim: list, drop: list, keep: set, note: str, allow_missing: bool = False) -> Path:
    m = re.match(r"^(?P<name>[^-]+)-(?P<version>[^-]+)-(?P<tags>.+)\.whl$", src.name)
    if not m:
        raise SystemExit(f"not a wheel file name: {src.name}")
    name, version, tags = m["name"], m["version"], m["tags"]
    if "+" in version:
        raise SystemExit(f"{src.name} already has a local version")
    new_version = f"{version}+{local}"
    old_info, new_info = f"{name}-{version}.dist-info", f"{name}-{new_version}.dist-info"
    out = outdir / f"{name}-{new_version}-{tags}.whl"

    dropped, dropped_bytes = 0, 0
    with zipfile.ZipFile(src) as zin:
        members = [i for i in zin.infolist() if not i.is_dir()]
        names = {i.filename for i in members}
        missing = sorted(k for k in keep if any(k.startswith(p) for p in trim) and k not in names)
        if missing and not allow_missing:
            raise SystemExit(f"{src.name}: keep-list paths not in the wheel: {missing[:5]} ...")
        files = []
        for info in members:
            path = info.filename
            if path.startswith(old_info + "/"):
                continue
            if any(path.startswith(p) for p in drop) or (any(path.startswith(p) for p in trim) and path not in keep):
                dropped += 1
                dropped_bytes += info.file_size
                continue
            files.append((path, zin.read(info), info.external_attr))
        meta = {i.filename[len(old_info) + 1 :]: zin.read(i) for i in members if i.filename.startswith(old_info + "/")}

    metadata = meta["METADATA"].decode("utf-8")
    metadata = re.sub(r"^Version: .*$", f"Version: {new_version}", metadata, count=1, flags=re.M)
    summary = (
        f"[wamcore benchmark-only repack of {name} {version}: {note or 'unused files removed'}; "
        f"{dropped} files ({dropped_bytes / 1e6:.1f} MB unpacked) dropped; NOT for general use] "
    )
    if re.search(r"^Summary: ", metadata, flags=re.M):
        metadata = re.sub(r"^Summary: ", "Summary: " + summary.replace("\\", "\\\\"), metadata, count=1, flags=re.M)
    else:
        metadata = metadata.replace("\n", f"\nSummary: {summary}\n", 1)
    meta["METADATA"] = metadata.encode("utf-8")
    meta.pop("RECORD", None)
    meta.pop("INSTALLER", None)
    meta.pop("REQUESTED", None)

    outdir.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    record = []
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=9) as zout:

        def put(path: str, data: bytes, attr: int = 0o644 << 16) -> None:
            zi = zipfile.ZipInfo(path, FIXED_TIME)
            zi.external_attr = attr or (0o644 << 16)
            zi.compress_type = zipfile.ZIP_DEFLATED
            zout.writestr(zi, data, compresslevel=9)
            record.append(f"{path},{record_hash(data)},{len(data)}")

        for path, data, attr in files:
            put(path, data, attr)
        for rel in sorted(meta):
            put(f"{new_info}/{rel}", meta[rel])
        rec_path = f"{new_info}/RECORD"
        record.append(f"{rec_path},,")
        zi = zipfile.ZipInfo(rec_path, FIXED_TIME)
        zi.external_attr = 0o644 << 16
        zi.compress_type = zipfile.ZIP_DEFLATED
        zout.writestr(zi, "\n".join(record) + "\n", compresslevel=9)
    tmp.replace(out)
    print(f"repacked {src.name} -> {out.name}: kept {len(files)} files, dropped {dropped} "
          f"({dropped_bytes / 1e6:.1f} MB unpacked); {src.stat().st_size / 1e6:.1f} MB -> {out.stat().st_size / 1e6:.2f} MB")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("src", type=Path)
    ap.add_argument("outdir", type=Path)
    ap.add_argument("--local", default="wamcore.bench", help="PEP 440 local version label appended to the version")
    ap.add_argument("--trim", action="append", default=[], help="prefix whose members are kept only if in --keep-list")
    ap.add_argument("--drop", action="append", default=[], help="prefix whose members are always dropped")
    ap.add_argument("--keep-list", type=Path, default=None)
    ap.add_argument("--note", default="")
    ap.add_argument("--allow-missing", action="store_true",
                    help="keep-list paths under --trim may be absent (a distribution split over several wheels)")
    args = ap.parse_args(argv)
    keep = read_keep_list(args.keep_list)
    keep = {k for k in keep if any(k.startswith(p) for p in args.trim)}
    repack(args.src, args.outdir, args.local, args.trim, args.drop, keep, args.note, args.allow_missing)
    return 0


if __name__ == "__main__":
    sys.exit(main())
