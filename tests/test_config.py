"""The one config helper: defaults < environment < YAML < command line; nested configs flattened; clear errors."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import yaml

from textwm.config import ConfigCLI, ConfigError, config_dict, load, option


@dataclass(frozen=True)
class Inner:
    gen_length: int = option(16, "tokens")
    temperature: float = option(1.0, "temperature")

    def __post_init__(self) -> None:
        if self.gen_length < 1:
            raise ValueError(f"gen_length must be >= 1, got {self.gen_length}")


@dataclass
class Outer:
    mode: str = option(help="what to do", positional=True, choices=("a", "b"))
    name: str = option("x", "a name")
    port: int = option(1, "a port", env="TEXTWM_TEST_PORT")
    tags: list[str] = option(help="tags", default_factory=list)
    loud: bool = option(False, "a switch")
    limit: int | None = option(None, "optional")
    key: str = option("", "a secret", secret=True)
    inner: Inner = option(help="nested", default_factory=lambda: Inner(gen_length=8), rename={"gen_length": "max_tokens"})


def parse(*argv):
    return ConfigCLI(Outer, prog="t").parse(list(argv))[0]


def test_precedence_and_flattening(tmp_path, monkeypatch):
    assert parse("a") == Outer(mode="a", inner=Inner(gen_length=8))
    monkeypatch.setenv("TEXTWM_TEST_PORT", "7")
    cfg = tmp_path / "c.yaml"
    cfg.write_text("name: from-yaml\nport: 9\ninner: {temperature: 0.5}\ntags: [p, q]\n")
    c = parse("b", "--config", str(cfg), "--max-tokens", "3", "limit=4", "--loud")
    assert (c.mode, c.name, c.port, c.tags, c.loud, c.limit) == ("b", "from-yaml", 9, ["p", "q"], True, 4)
    assert c.inner == Inner(gen_length=3, temperature=0.5)
    assert parse("a", "--port", "5").port == 5                       # flag > environment
    assert parse("a").port == 7                                      # environment > default
    c = parse("a", "--tags", "t1", "t2", "name=kv", "max_tokens=2")  # flat keys of nested fields too
    assert (c.tags, c.name, c.inner.gen_length) == (["t1", "t2"], "kv", 2)
    assert "key" not in config_dict(c) and config_dict(c)["inner"] == {"gen_length": 2, "temperature": 1.0}
    (tmp_path / "saved.yaml").write_text(yaml.safe_dump(config_dict(c)))
    assert load(Outer, path=tmp_path / "saved.yaml") == Outer(**{**c.__dict__, "key": ""})   # the secret is not saved


@pytest.mark.parametrize(("argv", "message"), [
    (("a", "--port", "x"), "--port must be an integer, got 'x'"),
    (("a", "prot=3"), "unknown config key 'prot' (did you mean 'port'?)"),
    (("a", "--max-tokens", "0"), "gen_length must be >= 1, got 0"),
    (("a", "loud=maybe"), "override: loud must be true or false, got 'maybe'"),
])
def test_errors_name_the_key(argv, message):
    with pytest.raises(ConfigError) as info:
        parse(*argv)
    assert message in str(info.value)


def test_yaml_errors_name_the_file(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("port: [1]\n")
    with pytest.raises(ConfigError, match=rf"{bad}: port must be an integer"):
        parse("a", "--config", str(bad))
    bad.write_text("inner: {gen_lenth: 2}\n")
    with pytest.raises(ConfigError, match=r"unknown config key 'inner.gen_lenth' \(did you mean 'inner.gen_length'\?\)"):
        parse("a", "--config", str(bad))
    with pytest.raises(ConfigError, match="config file not found"):
        parse("a", "--config", str(tmp_path / "none.yaml"))
    with pytest.raises(ConfigError, match="required: mode"):
        load(Outer)
    with pytest.raises(SystemExit):        # argparse: a choice that does not exist
        parse("c")


def test_take_flags_pulls_another_tools_flags_out_and_keeps_the_rest_in_order():
    from textwm.cli_checks import take_flags
    from textwm.config import ConfigError

    found, rest = take_flags(["--split", "a", "--shuffle", "--out=x.jsonl", "--split", "b", "--seed", "1"],
                             ("--out", "--split", "--limit"))
    assert found == {"split": "b", "out": "x.jsonl"} and rest == ["--shuffle", "--seed", "1"]
    assert take_flags(["--lim", "3"], ("--limit",)) == ({}, ["--lim", "3"])    # spelled exactly: no abbreviations
    with pytest.raises(ConfigError, match="--limit needs a value"):
        take_flags(["--limit"], ("--limit",))
