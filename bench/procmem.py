"""Peak resident memory of a command and all its descendants (Beam workers are subprocesses)."""

from __future__ import annotations

import os

PAGE = os.sysconf("SC_PAGE_SIZE")
CLK_TCK = os.sysconf("SC_CLK_TCK")


def proc_stats() -> dict[int, list[str]]:
    """pid -> the fields of /proc/<pid>/stat after the command name (index 1 is the parent)."""
    table = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                table[int(name)] = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
    return table


def tree(root: int, table: dict[int, list[str]]) -> list[int]:
    """`root` and every process below it."""
    children: dict[int, list[int]] = {}
    for pid, fields in table.items():
        children.setdefault(int(fields[1]), []).append(pid)
    out, stack = [], [root]
    while stack:
        pid = stack.pop()
        if pid in table:
            out.append(pid)
            stack.extend(children.get(pid, []))
    return out


def tree_stats(root: int) -> dict[str, float]:
    """Resident bytes of the tree and of its largest process, and the tree's CPU seconds
    (user + system, reaped children included)."""
    table = proc_stats()
    pids = tree(root, table)
    rss = [int(table[p][21]) * PAGE for p in pids]
    cpu = sum(int(x) for p in pids for x in table[p][11:15]) / CLK_TCK
    return {"rss": sum(rss), "largest": max(rss, default=0), "cpu": cpu}


def tree_rss(root: int) -> int:
    """Bytes resident in `root` and every process below it, from /proc."""
    return int(tree_stats(root)["rss"])
