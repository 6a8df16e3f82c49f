"""Built-in weights: split GGUF parts joined once, size and sha256 pinned, refused otherwise."""

import hashlib
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agora.models import builtins as b
from agora.models.builtins import BuiltinModel, BuiltinModelError, Part, join_parts
from agora.models.pool import PoolConfigError, builtin_pool_name, builtin_pool_specs, load_pool
from agora.cli.main import app


def fake_model(tmp_path: Path, monkeypatch, chunks: list[bytes], pinned: bytes | None = None) -> BuiltinModel:
    """A split model whose parts are files in tmp_path (the part lookup is patched)."""
    files = {}
    for i, data in enumerate(chunks, 1):
        f = tmp_path / "site" / f"fake_part{i}" / "data" / f"part{i:02d}.bin"
        f.parent.mkdir(parents=True)
        f.write_bytes(data)
        files[f"fake-part{i}"] = f
    monkeypatch.setattr(b, "_part_file", lambda part: files[part.distribution])
    whole = pinned if pinned is not None else b"".join(chunks)
    return BuiltinModel(key="fake", title="Fake", params="1", quantization="-", prompt_format="chat", family="f",
                        license="-", file_name="fake.gguf", parts=tuple(Part(d, "1.0") for d in files),
                        size_bytes=len(whole), sha256=hashlib.sha256(whole).hexdigest())


def test_parts_are_joined_in_order_once_and_reused(tmp_path, monkeypatch):
    model = fake_model(tmp_path, monkeypatch, [b"GGUF" + b"a" * 10, b"b" * 7, b"c" * 3])
    target = tmp_path / "cache" / "fake.gguf"
    assert join_parts(model, target) == target
    assert target.read_bytes() == b"GGUF" + b"a" * 10 + b"b" * 7 + b"c" * 3
    assert Path(str(target) + ".sha256").is_file()
    mtime = target.stat().st_mtime_ns
    monkeypatch.setattr(b, "_sha256", lambda p: pytest.fail("a verified cached file is not hashed again"))
    assert join_parts(model, target) == target and target.stat().st_mtime_ns == mtime
    assert sorted(p.name for p in target.parent.iterdir()) == ["fake.gguf", "fake.gguf.sha256"]


def test_a_joined_file_with_the_wrong_sha256_is_refused_and_not_kept(tmp_path, monkeypatch):
    model = fake_model(tmp_path, monkeypatch, [b"GGUF1234", b"5678"], pinned=b"GGUF1234567X")
    target = tmp_path / "cache" / "fake.gguf"
    with pytest.raises(BuiltinModelError) as exc:
        join_parts(model, target)
    message = str(exc.value)
    assert "\n" not in message and "refused" in message and "sha256" in message and "12 bytes" in message
    assert list(target.parent.iterdir()) == []  # neither the file nor a temporary part is left


def test_a_joined_file_with_the_wrong_size_is_refused(tmp_path, monkeypatch):
    model = fake_model(tmp_path, monkeypatch, [b"GGUF1234", b"5678"], pinned=b"GGUF12345678-longer")
    with pytest.raises(BuiltinModelError, match=r"joined file is 12 bytes .* expected 19 bytes"):
        join_parts(model, tmp_path / "cache" / "fake.gguf")


def test_a_corrupted_cache_file_is_joined_again(tmp_path, monkeypatch):
    model = fake_model(tmp_path, monkeypatch, [b"GGUF1234", b"5678"])
    target = tmp_path / "cache" / "fake.gguf"
    join_parts(model, target)
    target.write_bytes(b"GGUF0000zzzz")  # same size, other bytes: the sidecar no longer matches the mtime
    os.utime(target, ns=(1, 1))
    join_parts(model, target)
    assert target.read_bytes() == b"GGUF12345678"


def test_missing_part_packages_are_named_with_the_pip_line(tmp_path, monkeypatch):
    model = BuiltinModel(key="fake", title="Fake", params="1", quantization="-", prompt_format="chat", family="f",
                         license="-", file_name="fake.gguf", size_bytes=1, sha256="0" * 64,
                         parts=(Part("agora-no-such-part1", "0.9.0"), Part("agora-no-such-part2", "0.9.0")))
    monkeypatch.setattr(b, "cache_dir", lambda: tmp_path)
    with pytest.raises(BuiltinModelError) as exc:
        join_parts(model)
    assert str(exc.value) == ("builtin:fake (Fake) needs 2 more package(s), e.g. agora-no-such-part1==0.9.0: "
                              "pip install 'agora-no-such-part1==0.9.0' 'agora-no-such-part2==0.9.0'")
    assert b.missing_packages(model) == ["agora-no-such-part1==0.9.0", "agora-no-such-part2==0.9.0"]


def test_a_refused_builtin_is_one_line_from_the_cli(tmp_path, monkeypatch):
    model = fake_model(tmp_path, monkeypatch, [b"GGUF1234", b"5678"], pinned=b"GGUF1234567X")
    monkeypatch.setitem(b.BUILTINS, "fake", model)
    monkeypatch.setattr(b, "cache_dir", lambda: tmp_path / "cache")
    b.resolve_builtin.cache_clear()
    monkeypatch.setattr(b, "BUILTIN_MODELS", (*b.BUILTIN_MODELS, "builtin:fake"))
    import agora.models.pool as pool_module

    monkeypatch.setattr(pool_module, "BUILTIN_MODELS", b.BUILTIN_MODELS)
    pool = tmp_path / "pool.toml"
    pool.write_text('[[models]]\nname = "f"\nbackend = "llamacpp"\npath = "builtin:fake"\n')
    result = CliRunner().invoke(app, ["run", "align", "--pool", str(pool), "--db", str(tmp_path / "t.db")])
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: builtin:fake: joined file is 12 bytes") and "refused" in lines[0]
    b.resolve_builtin.cache_clear()


def test_builtin_pools_by_name():
    assert [s.name for s in builtin_pool_specs("default")] == ["qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"]
    assert [s.path for s in builtin_pool_specs("tiny")] == ["builtin:smollm2", "builtin:gemma3-270m"]
    assert builtin_pool_name("tiny") == "tiny" and builtin_pool_name("builtin:default") == "default"
    assert builtin_pool_name("pool.toml") is None and builtin_pool_name(None) is None
    with pytest.raises(PoolConfigError, match="unknown built-in pool 'huge'; choose one of default, tiny"):
        builtin_pool_specs("huge")
    with pytest.raises(PoolConfigError, match="pool file not found .built-in pools: default, tiny"):
        load_pool("no-such-pool.toml")


def test_pool_list_shows_pools_models_and_install_state():
    result = CliRunner().invoke(app, ["pool", "list", "--json"])
    assert result.exit_code == 0, result.output
    import json

    data = json.loads(result.output)
    assert data["pools"] == {"default": ["qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"], "tiny": ["smollm2-135m", "gemma3-270m"],
                             "diverse": ["qwen1.5b+checker", "qwen1.5b+pot", "qwen0.5b+pot"]}
    rows = {r["model"]: r for r in data["models"]}
    assert rows["builtin:qwen2.5-coder-1.5b"]["size_mb"] == 1117 and rows["builtin:qwen2.5-coder-1.5b"]["params"] == "1.5B"
    assert rows["builtin:gemma3-270m"]["prompt_format"] == "fewshot"
    assert all(r["installed"] for r in rows.values())  # every weight package is a dependency


@pytest.mark.slow
def test_the_installed_qwen_parts_join_to_the_pinned_files():
    for key in ("qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"):
        path = Path(b.resolve_builtin(f"builtin:{key}"))
        assert path.stat().st_size == b.BUILTINS[key].size_bytes
        with path.open("rb") as fh:
            assert fh.read(4) == b"GGUF"
