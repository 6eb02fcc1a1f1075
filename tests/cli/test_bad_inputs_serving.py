"""Bad input to the newest surfaces, table-driven as test_bad_inputs.py: `roberta serve` options
that cannot mean anything, an address it cannot listen on, API keys or a key file it cannot use,
a CORS origin no browser sends, damaged ONNX exports, `export --tolerance` that would disable its
check, and a directory that cannot be published.

Each row: exit status 2, one stderr line naming the cause, nothing new, removed or changed on
disk; a server never starts (no "serving at" line on stdout). One test runs `roberta serve` as a
subprocess on a port in use: one line, exit 2, no traceback.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

import refusals
from data_fixtures import make_documents, write_byte_tokenizer, write_text
from refusals import Case
from roberta import RobertaConfig, RobertaModel, cli
from roberta.checkpoint import save
from roberta.data.prepare import prepare
from roberta.tokenizer import load_tokenizer

pytestmark = pytest.mark.usefixtures("one_thread")


@dataclass
class Assets:
    root: Path
    checkpoint: Path
    export: Path
    corpus: Path
    tokenizer: Path
    busy: socket.socket  # listening: its port is in use


@dataclass
class Env(refusals.Env):
    assets: Assets

    def export_copy(self, damage: Callable[[Path], object]) -> str:
        copy = self.work / "export"
        shutil.copytree(self.assets.export, copy)
        damage(copy)
        return str(copy)


def serve(*options: str) -> Callable[[Env], list[str]]:
    return lambda env: ["serve", str(env.assets.checkpoint), *options]


def serve_with_keys(content: str | bytes | None, *options: str) -> Callable[[Env], list[str]]:
    """`serve` with `--api-key-file` holding `content` (None: a file that is not there), on any
    free port: the refusal comes after the bind, before the model loads."""

    def argv(env: Env) -> list[str]:
        path = str(env.work / "missing.txt") if content is None else env.file("keys.txt", content)
        return ["serve", str(env.assets.checkpoint), "--port", "0", "--api-key-file", path, *options]

    return argv


def serve_damaged(damage: Callable[[Path], object]) -> Callable[[Env], list[str]]:
    return lambda env: ["serve", env.export_copy(damage), "--runtime", "onnx"]


def edit_manifest(edit: Callable[[dict], object]) -> Callable[[Path], None]:
    def damage(export: Path) -> None:
        manifest = json.loads((export / "onnx.json").read_text())
        edit(manifest)
        (export / "onnx.json").write_text(json.dumps(manifest))

    return damage


def truncate(name: str) -> Callable[[Path], None]:
    def damage(export: Path) -> None:
        data = (export / name).read_bytes()
        (export / name).write_bytes(data[: len(data) // 3])

    return damage


def export(*options: str) -> Callable[[Env], list[str]]:
    return lambda env: ["export", str(env.assets.checkpoint), str(env.work / "onnx"), *options]


def publish_fails(env: Env) -> list[str]:
    """`prepare --overwrite` onto an existing corpus whose final rename the OS refuses."""
    out = env.work / "corpus"
    shutil.copytree(env.assets.corpus, out)
    real = os.replace

    def replace(src, dst, *args, **kwargs):
        if str(src).endswith(".partial"):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(src), None, str(dst))
        return real(src, dst, *args, **kwargs)

    env.monkeypatch.setattr(os, "replace", replace)
    text = write_text(env.work / "text.txt", make_documents(1, 5))
    return ["prepare", str(text), "--tokenizer", str(env.assets.tokenizer), "--out", str(out)] + [
        "--overwrite",
        "--workers",
        "1",
        "--no-progress",
    ]


CASES = [
    Case("serve/timeout-zero", "field 'timeout' must be positive, not 0.0", argv=serve("--timeout", "0")),
    Case(
        "serve/timeout-negative", "field 'timeout' must be positive, not -1.0", argv=serve("--timeout", "-1")
    ),
    Case(
        "serve/timeout-nan",
        "field 'timeout' must be a finite number, not nan",
        argv=serve("--timeout", "nan"),
    ),
    Case(
        "serve/body-zero", "field 'max_body_kb' must be at least 1, not 0", argv=serve("--max-body-kb", "0")
    ),
    Case("serve/body-negative", "field 'max_body_kb' must be at least 1", argv=serve("--max-body-kb", "-1")),
    Case("serve/items-zero", "field 'max_items' must be at least 1", argv=serve("--max-items", "0")),
    Case(
        "serve/tokens-zero",
        "field 'max_request_tokens' must be at least 1",
        argv=serve("--max-request-tokens", "0"),
    ),
    Case("serve/answers-zero", "field 'max_answers' must be at least 1", argv=serve("--max-answers", "0")),
    Case(
        "serve/batch-zero",
        "field 'max_batch_tokens' must be at least 1",
        argv=serve("--max-batch-tokens", "0"),
    ),
    Case("serve/wait-nan", "field 'max_wait_ms' must be a finite number", argv=serve("--max-wait-ms", "nan")),
    Case("serve/port-range", "field 'port' must be in [0, 65535], not 70000", argv=serve("--port", "70000")),
    Case(
        "serve/port-in-use",
        "Address already in use",
        argv=lambda env: [
            "serve",
            str(env.assets.checkpoint),
            "--port",
            str(env.assets.busy.getsockname()[1]),
        ],
    ),
    Case(
        "serve/host-unknown",
        "--host 'no-such-host.invalid': cannot be resolved",
        argv=serve("--host", "no-such-host.invalid"),
    ),
    Case(
        "serve/host-not-here", "cannot listen on 192.0.2.1:", argv=serve("--host", "192.0.2.1", "--port", "0")
    ),
    Case("serve/key-file-missing", "missing.txt: No such file or directory", argv=serve_with_keys(None)),
    Case(
        "serve/key-file-no-key",
        "keys.txt: holds no key (blank lines and # comments are ignored)",
        argv=serve_with_keys("# rotated out\n\n   \n"),
    ),
    Case(
        "serve/key-file-spaces",
        "keys.txt, line 2: a key must be one or more visible ASCII characters, no spaces",
        argv=serve_with_keys("# ours\ntwo words\n"),
    ),
    Case(
        "serve/key-file-not-utf8",
        "keys.txt: not UTF-8 text",
        argv=serve_with_keys(b"caf\xe9\n", "--api-key", "k"),
    ),
    Case(
        "serve/key-file-directory",
        "Is a directory",
        argv=lambda env: [*serve("--port", "0")(env), "--api-key-file", str(env.work)],
    ),
    Case(
        "serve/key-empty", "--api-key: a key must be one or more", argv=serve("--port", "0", "--api-key", "")
    ),
    Case(
        "serve/cors-origin-path",
        "--cors-origin 'https://app.example/': an origin is scheme://host[:port] with no path",
        argv=serve("--port", "0", "--cors-origin", "https://app.example/"),
    ),
    Case(
        "serve/cors-origin-wildcard-host",
        "(a wildcard matches no Origin header: name each origin)",
        argv=serve(
            "--port", "0", "--cors-origin", "https://ok.example", "--cors-origin", "https://*.example.com"
        ),
    ),
    Case(
        "serve/cors-origin-wildcard-port",
        "(a wildcard matches no Origin header",
        argv=serve(
            "--port", "0", "--cors-origin", "https://ok.example", "--cors-origin", "https://app.example:*"
        ),
    ),
    Case(
        "serve/cors-origin-capitals",
        "(in lower case, as a browser sends it)",
        argv=serve(
            "--port", "0", "--cors-origin", "https://ok.example", "--cors-origin", "https://App.Example"
        ),
    ),
    Case(
        "serve/cors-origin-default-port",
        "(a browser leaves out https's default port 443)",
        argv=serve(
            "--port", "0", "--cors-origin", "https://ok.example", "--cors-origin", "https://app.example:443"
        ),
    ),
    Case(
        "serve/cors-origin-port-range",
        "(port 70000 is not a port)",
        argv=serve(
            "--port", "0", "--cors-origin", "https://ok.example", "--cors-origin", "http://app.example:70000"
        ),
    ),
    Case(
        "serve/cors-origin-user",
        "--cors-origin 'https://me@app.example': an origin is scheme://host[:port] with no path",
        argv=serve(
            "--port", "0", "--cors-origin", "https://ok.example", "--cors-origin", "https://me@app.example"
        ),
    ),
    Case(
        "serve/cors-origin-query",
        "--cors-origin 'https://app.example?x=1': an origin is scheme://host[:port] with no path",
        argv=serve(
            "--port", "0", "--cors-origin", "https://ok.example", "--cors-origin", "https://app.example?x=1"
        ),
    ),
    Case(
        "serve/cors-origin-no-scheme",
        "--cors-origin 'app.example': an origin is scheme://host[:port] with no path",
        argv=serve("--port", "0", "--cors-origin", "https://ok.example", "--cors-origin", "app.example"),
    ),
    Case(
        "serve/onnx-no-encoder",
        "feature-extraction/onnx/model.onnx: missing: the export is incomplete",
        argv=serve_damaged(lambda e: (e / "feature-extraction/onnx/model.onnx").unlink()),
    ),
    Case(
        "serve/onnx-truncated-encoder",
        "feature-extraction/onnx/model.onnx: not a readable ONNX graph",
        argv=serve_damaged(truncate("feature-extraction/onnx/model.onnx")),
    ),
    Case(
        "serve/onnx-truncated-head",
        "sentiment/onnx/model.onnx: not a readable ONNX graph",
        argv=serve_damaged(truncate("sentiment/onnx/model.onnx")),
    ),
    Case(
        "serve/onnx-truncated-lm",
        "fill-mask/onnx/model.onnx: not a readable ONNX graph",
        argv=serve_damaged(truncate("fill-mask/onnx/model.onnx")),
    ),
    Case(
        "serve/onnx-old-layout",
        "an ONNX export in the old layout (roberta-onnx-1); the layout moved",
        argv=serve_damaged(edit_manifest(lambda m: m.__setitem__("format", "roberta-onnx-1"))),
    ),
    Case(
        "serve/onnx-no-config",
        "onnx.json: field 'config' must be a JSON object, not missing",
        argv=serve_damaged(edit_manifest(lambda m: m.pop("config"))),
    ),
    Case(
        "serve/onnx-heads-list",
        "onnx.json: field 'heads' must be a JSON object, not a list",
        argv=serve_damaged(edit_manifest(lambda m: m.__setitem__("heads", []))),
    ),
    Case(
        "serve/onnx-head-no-kind",
        "field 'heads.sentiment' must be an object with a 'kind'",
        argv=serve_damaged(edit_manifest(lambda m: m["heads"].__setitem__("sentiment", 3))),
    ),
    Case(
        "serve/onnx-no-tokenizer",
        "export/feature-extraction: no tokenizer files",
        argv=serve_damaged(
            lambda e: [
                (e / "feature-extraction" / name).unlink()
                for name in ("vocab.json", "merges.txt", "tokenizer.json")
            ]
        ),
    ),
    Case(
        "export/tolerance-nan",
        "export: field 'tolerance' must be a finite number, not nan",
        argv=export("--tolerance", "nan"),
    ),
    Case(
        "export/tolerance-inf",
        "export: field 'tolerance' must be a finite number, not inf",
        argv=export("--tolerance", "inf"),
    ),
    Case(
        "export/tolerance-negative",
        "export: field 'tolerance' must be at least 0, not -1.0",
        argv=export("--tolerance", "-1"),
    ),
    Case(
        "convert/tolerance-inf",
        "convert: field 'tolerance' must be a finite number, not inf",
        argv=lambda env: ["convert", str(env.assets.checkpoint), str(env.work / "out"), "--tolerance", "inf"],
    ),
    Case("publish/rename-refused", "corpus: Permission denied", argv=publish_fails),
]


@pytest.fixture(scope="module")
def assets(tmp_path_factory) -> Assets:
    root = tmp_path_factory.mktemp("assets")
    tokenizer = write_byte_tokenizer(root / "tokenizer")
    tok = load_tokenizer(tokenizer)
    torch.manual_seed(0)
    config = RobertaConfig(
        vocab_size=tok.vocab_size, hidden_size=32, num_layers=2, num_heads=2, ffn_size=64, max_positions=66
    )
    model = RobertaModel(config)
    model.add_classification_head("sentiment", 3)
    checkpoint = save(root / "checkpoint", model, tok)
    assert cli.main(["export", str(checkpoint), str(root / "export")]) == 0
    text = write_text(root / "text.txt", make_documents(0, 10))
    corpus = prepare([text], tokenizer, root / "corpus", workers=1, valid_fraction=0.1, progress=False)
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    yield Assets(root, checkpoint, root / "export", corpus, tokenizer, busy)
    busy.close()


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_input_is_refused_in_one_line_and_leaves_nothing(
    case: Case, assets, tmp_path, monkeypatch, capsys
):
    capsys.readouterr()  # what building the assets printed
    refusals.check(case, Env(tmp_path, assets, monkeypatch), capsys, tmp_path, assets.root)


def test_cases_cover_serve_export_and_publishing():
    refusals.check_table(CASES, {"serve", "export", "convert", "publish"}, 20)


@pytest.mark.slow
def test_roberta_serve_with_a_key_file_it_cannot_read_is_one_line_and_exit_2(assets, tmp_path):
    """The command a user types: the refusal names the file, never a key, and nothing is served."""
    command = [str(Path(sys.executable).with_name("roberta")), "serve", str(assets.checkpoint), "--port", "0"]
    missing = tmp_path / "keys.txt"
    done = subprocess.run(
        [*command, "--api-key-file", str(missing)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.splitlines() == [
        f"roberta: error: --api-key-file {missing}: No such file or directory"
    ]


@pytest.mark.slow
def test_roberta_serve_on_a_port_in_use_is_one_line_and_exit_2(assets):
    """The command a user types, as a subprocess: no "serving at" line, no uvicorn error, no traceback."""
    command = [str(Path(sys.executable).with_name("roberta")), "serve", str(assets.checkpoint)]
    port = str(assets.busy.getsockname()[1])
    done = subprocess.run([*command, "--port", port], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.splitlines() == [
        f"roberta: error: cannot listen on 127.0.0.1:{port}: Address already in use"
    ]
