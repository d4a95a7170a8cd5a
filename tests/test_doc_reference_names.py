"""docs/orchestrator.md's table of the reference prime-rl's names lists every name the loader translates
(`config.suggest.REFERENCE_SPELLINGS`) with the field it points to."""

from __future__ import annotations

import re
from pathlib import Path

from prime_rl.config.suggest import REFERENCE_SPELLINGS

DOC = Path(__file__).resolve().parents[1] / "docs" / "orchestrator.md"


def _table() -> dict[str, str]:
    text = DOC.read_text()
    section = text.split("## Names in PrimeIntellect's prime-rl", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 2 and cells[0].startswith(("`", "a source", "sft")):
            for name in re.findall(r"`([^`]+)`", cells[0]):
                rows[name.strip("[]")] = cells[1]
            if cells[0].startswith("a source's"):
                rows[re.findall(r"`([^`]+)`", cells[0])[0].split(".")[-1]] = cells[1]
    return rows


def test_every_translated_reference_name_is_in_the_table_with_its_field() -> None:
    rows = _table()
    for ref_name, ours, _note in REFERENCE_SPELLINGS.values():
        listed = ref_name.replace("orchestrator.train.source[N].", "")
        assert listed in rows, f"{ref_name} missing from docs/orchestrator.md's reference-name table"
        if ours is not None:
            assert "`" + ".".join(ours) in rows[listed] or ".".join(ours) in rows[listed], (ref_name, rows[listed])
