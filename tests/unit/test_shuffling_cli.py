"""The shuffle simulation entry point runs end to end and says what it moved."""

from __future__ import annotations

import pytest

from simulations.shuffle.cli import main


@pytest.mark.parametrize(
    "args",
    [
        ["--silos", "4", "--units", "8", "--storage", "2", "--unit-bytes", "999"],
        ["-K", "5", "-N", "10", "-t", "2", "--decentralized", "--random", "--unit-bytes", "500"],
        ["-K", "3", "-N", "3", "-t", "0", "--no-key", "--unit-bytes", "64"],
    ],
)
def test_cli_runs_one_shuffle(args, capsys):
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "bytes moved: coded" in out and "uncoded" in out
    assert "every silo decoded exactly its units (SHA-256 checked, stores committed): True" in out


def test_cli_reads_units_from_a_directory(tmp_path, capsys):
    for i in range(6):
        (tmp_path / f"part{i}.bin").write_bytes(bytes([i]) * (100 + 37 * i))
    assert main(["-K", "3", "-N", "6", "-t", "1", "--data", str(tmp_path)]) == 0
    assert "q(K-t)/(t+1) = 2" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="has 6 files"):
        main(["-K", "3", "-N", "9", "-t", "1", "--data", str(tmp_path)])


def test_cli_flower_always_encrypts():
    with pytest.raises(SystemExit):
        main(["--flower", "--no-key"])
