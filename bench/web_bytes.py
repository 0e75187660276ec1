"""``python bench/web_bench.py bytes``: what each epoch fetches over HTTP (see web_bench's
docstring). Each case runs in a process of its own (``bytes-case``) and prints one JSON line."""

from __future__ import annotations

import argparse
import json
import re
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from web_bench import REPO, pattern, write_foreign, write_info

# name, shards, samples a shard, server ("ranged": tests/support/webserver.py; "http.server": Python's,
# no Range), index ("info": timm's _info.json; "": none, a header scan)
CASES = (
    ("info-8x60", 8, 60, "ranged", "info"),
    ("info-200x50", 200, 50, "ranged", "info"),
    ("scan-8x60", 8, 60, "ranged", ""),
    ("http.server-scan-4x60", 4, 60, "http.server", ""),
    ("http.server-info-4x60", 4, 60, "http.server", "info"),
)
RESET = re.compile(r"^(ConnectionResetError|BrokenPipeError)", re.M)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _HttpServer:
    """``python -m http.server`` on 127.0.0.1, its log read back: GETs per path, resets."""

    def __init__(self, root: Path, log: Path) -> None:
        self.port, self.log = _free_port(), log
        cmd = [sys.executable, "-m", "http.server", str(self.port), "--bind", "127.0.0.1"]
        self.proc = subprocess.Popen(
            [*cmd, "--directory", str(root)], stdout=subprocess.DEVNULL, stderr=log.open("w")
        )
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.05)
        self.url, self.mark = f"http://127.0.0.1:{self.port}", 0

    def since(self) -> tuple[Counter, int]:
        """(GETs per path, resets) logged since the last call."""
        time.sleep(0.5)  # the server's last lines
        text = self.log.read_text()
        new, self.mark = text[self.mark :], len(text)
        return Counter(re.findall(r'"GET (\S+) HTTP', new)), len(RESET.findall(new))

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()


def bytes_case() -> None:
    """One case (``bytes-case NAME ROOT EPOCHS``): make_loader and the epochs, counted."""
    from loaders import make_loader
    from tests.support.webserver import WebServer

    name, root, epochs = sys.argv[2], Path(sys.argv[3]), int(sys.argv[4])
    _n, shards, _per, server, _index = next(c for c in CASES if c[0] == name)
    sizes = {f"/{p.name}": p.stat().st_size for p in root.glob("part-*.tar")}
    if server == "ranged":
        srv: Any = WebServer(root)

        def since(state: dict) -> dict:
            sent, reqs, resets = srv.total_sent(".tar"), srv.requests, srv.resets
            got = {
                "bytes": sent - state.get("sent", 0),
                "requests": len(reqs) - state.get("requests", 0),
                "gets": Counter(p for _m, p, _r in reqs[state.get("requests", 0) :]),
                "resets": resets - state.get("resets", 0),
            }
            state.update(sent=sent, requests=len(reqs), resets=resets)
            return got
    else:
        srv = _HttpServer(root, root.parent / f"{name}.log")

        def since(state: dict) -> dict:
            gets, resets = srv.since()
            # a GET of Python's server sends the whole file unless the client cuts it (a reset)
            full = sum(n * sizes.get(p, 0) for p, n in gets.items())
            return {"bytes": full, "requests": sum(gets.values()), "gets": gets, "resets": resets}

    try:
        state: dict = {}
        since(state)
        loader = make_loader(f"{srv.url}/{pattern(shards)}", 64, num_workers=2, seed=0)
        setup = getattr(loader.stats(memory=False), "setup", None)  # None: before issue 43
        out: dict[str, Any] = {"make_loader": since(state), "epochs": []}
        out["setup_stats"] = {
            "requests": getattr(setup, "requests", None),
            "network_bytes": getattr(setup, "network_bytes", None),
        }
        for e in range(epochs):
            loader.set_epoch(e)
            n = sum(len(b["keys"]) for b in loader)
            out["epochs"].append({"samples": n, **since(state)})
    finally:
        srv.close()
    print(json.dumps(out))


def _line(name: str, data: int, shards: int, got: dict) -> str:
    setup, made = got["setup_stats"], got["make_loader"]
    counted = (
        "no stats().setup"
        if setup["requests"] is None
        else f"stats().setup: {setup['requests']} requests, {setup['network_bytes'] / data:.3f}x"
    )
    text = (
        f"- **{name}**: make_loader fetched {made['bytes'] / data:.3f}x the data in "
        f"{made['requests']} requests ({counted})"
    )
    for e, ep in enumerate(got["epochs"]):
        tars = [n for p, n in ep["gets"].items() if p.endswith(".tar")]
        per = Counter(tars)
        text += (
            f"; epoch {e}: **{ep['bytes'] / data:.3f}x** the data, {ep['requests']} requests, "
            f"{ep['resets']} reset connections"
        )
        if name.startswith("http.server"):  # whole-file GETs: how many of each shard
            text += f", GETs per shard {dict(sorted(per.items()))} over {shards} shards"
    return text


def bytes_main(argv: list[str]) -> None:
    p = argparse.ArgumentParser(prog="web_bench.py bytes")
    p.add_argument("data", type=Path, nargs="?", default=Path("bench/data"))
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--out", default=None)
    p.add_argument("--cases", default=",".join(c[0] for c in CASES), help="comma-separated")
    args = p.parse_args(argv)
    lines = [
        f"# `python bench/web_bench.py bytes {args.data} --epochs {args.epochs}"
        + ("" if args.cases == ",".join(c[0] for c in CASES) else f" --cases {args.cases}")
        + "`",
        "",
        "Bytes each epoch fetched, against the data set's size, 1 rank x 2 workers (seed 0); "
        "shards of the bench's JPEGs (~105 KB) written by upstream webdataset. Ranged cases: "
        "what tests/support/webserver.py sent; Python's http.server: GETs from its log, each sending "
        "the whole file (it has no Range) unless a reset cut it. GETs per shard: how many "
        "shards were fetched once, twice ({times: shards}); a shard split between the two "
        "workers is fetched by both (without Range the second cannot start inside it; "
        "`cache_dir` fetches each shard once per host).",
        "",
    ]
    report: dict[str, Any] = {}
    for name, shards, per, _server, index in CASES:
        if name not in args.cases.split(","):
            continue
        root = write_foreign(args.data, shards, per)
        (root / "_info.json").unlink(missing_ok=True)
        if index == "info":
            write_info(root)
        cmd = [sys.executable, str(Path(__file__).with_name("web_bench.py")), "bytes-case"]
        run = subprocess.run(
            [*cmd, name, str(root), str(args.epochs)], capture_output=True, text=True, cwd=REPO
        )
        (root / "_info.json").unlink(missing_ok=True)
        if run.returncode != 0:
            raise SystemExit(f"{name} failed:\n{run.stderr[-3000:]}")
        got = json.loads(run.stdout.strip().splitlines()[-1])
        data = sum(f.stat().st_size for f in root.glob("part-*.tar"))
        report[name] = {"bytes": data, **got}
        lines.append(_line(name, data, shards, got))
        print(lines[-1], flush=True)
    if args.out:
        Path(args.out + ".json").write_text(json.dumps(report, indent=1))
        Path(args.out + ".md").write_text("\n".join(lines) + "\n")
