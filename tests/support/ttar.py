"""Unpack prometheus' `ttar` text archives (node_exporter's and procfs' fixture trees) into a folder.

Format: records separated by `# ttar - - -` lines; `Directory: p`, or `Path: p` + `Lines: N` + N
content lines (or `SymlinkTo: target`), then `Mode: NNN`. `NULLBYTE` stands for a NUL byte and a
trailing `EOF` on the last content line means the file has no final newline.
"""

from __future__ import annotations

import os


def unpack(archive: str, dest: str) -> None:
    with open(archive, "rb") as fh:
        lines = fh.read().split(b"\n")
    i = 0
    n = len(lines)
    while i < n:
        line = lines[i]
        if line.startswith(b"Directory: "):
            os.makedirs(os.path.join(dest, line[11:].decode()), exist_ok=True)
            i += 1
        elif line.startswith(b"Path: "):
            path = os.path.join(dest, line[6:].decode())
            os.makedirs(os.path.dirname(path), exist_ok=True)
            nxt = lines[i + 1]
            if nxt.startswith(b"SymlinkTo: "):
                target = nxt[11:].decode()
                if os.path.lexists(path):
                    os.remove(path)
                os.symlink(target, path)
                i += 2
                continue
            count = int(nxt[7:]) if nxt.startswith(b"Lines: ") else 0
            body = lines[i + 2:i + 2 + count]
            data = b"\n".join(body)
            if data.endswith(b"EOF"):
                data = data[:-3]
            elif count:
                data += b"\n"
            data = data.replace(b"NULLBYTE", b"\x00")
            with open(path, "wb") as out:
                out.write(data)
            i += 2 + count
        else:
            i += 1
