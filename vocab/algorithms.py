"""The algorithms gspo ships, each by its config name with the name its paper writes, for pages that must not load
torch to label an arm (report/). The registry (gspo.algos) registers exactly these (tests/algos/test_algos_registry.py);
a registration's title is read here, so each display name is stated once."""

from __future__ import annotations

TITLES = {
    "grpo": "GRPO", "dapo": "DAPO", "dr_grpo": "Dr. GRPO", "gspo": "GSPO", "gspo_token": "GSPO-token", "gmpo": "GMPO",
    "cispo": "CISPO", "sapo": "SAPO", "dppo_tv": "DPPO-TV", "dppo_kl": "DPPO-KL", "opsm": "OPSM", "maxrl": "MaxRL",
    "gdpo": "GDPO", "luspo": "LUSPO", "vespo": "VESPO", "dro": "DRO", "icepop": "IcePop",
}


def title(name: object) -> str:
    """An algorithm's name as its paper writes it; a name gspo does not ship (a plugin's, or one of an older
    version's runs) as it is."""
    return TITLES.get(str(name), str(name))
