"""docs/learning.md names the ladder's start model as `ladder.py` builds it and the `prime-rl tiny-model` default as
the command's config has it (a user building the model by hand gets the rung's model, not the default)."""

from __future__ import annotations

import re
from pathlib import Path

from prime_rl.config.utilities import TinyModelConfig

REPO = Path(__file__).resolve().parents[1]


def test_learning_doc_states_the_ladder_model_and_the_default():
    doc = " ".join((REPO / "docs" / "learning.md").read_text().split())
    m = re.search(r"random tiny model with hidden size (\d+) and (\d+) decoder layers, which `ladder.py` builds itself; "
                  r"by hand it is `prime-rl tiny-model OUT --hidden (\d+) --layers (\d+) --seed (\d+)` \(the command's "
                  r"default is hidden (\d+) x (\d+) layers", doc)  # fmt: skip
    assert m, "docs/learning.md does not say which tiny model the ladder starts from"
    hidden, layers, flag_hidden, flag_layers, seed, default_hidden, default_layers = map(int, m.groups())
    ladder = (REPO / "tests" / "learning" / "ladder.py").read_text()
    built = set(re.findall(r"cached_tiny_model\(hidden=(\d+), layers=(\d+), seed=(\d+)\)", ladder))
    assert built == {(str(hidden), str(layers), str(seed))} and (flag_hidden, flag_layers) == (hidden, layers)
    fields = TinyModelConfig.model_fields
    assert (default_hidden, default_layers) == (fields["hidden"].default, fields["layers"].default)
    assert "64x2" not in doc  # every mention spells out hidden size and layers
