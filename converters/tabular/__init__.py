"""Raw tabular data (Criteo click logs and other tables of a label, integer counts and categorical values) ->
training-ready shard sets for DeepFM (``ids``/``values``/``label``) and DLRM (``dense``/``sparse``/``label``),
with exact vocabularies or hashing. One driver: the two-pass job (``job.TabularJob``) every engine runs."""
from __future__ import annotations

__all__: list[str] = []
