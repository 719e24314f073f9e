"""What every section of the config shares: the version, the half tags and the frozen base model."""

from __future__ import annotations


from pydantic import BaseModel, ConfigDict

__all__ = [
    "CONFIG_VERSION", "ConfigModel", "OPERATIONAL", "TEXT", "VECTOR",
]



CONFIG_VERSION = 1

TEXT = {"half": "text"}
VECTOR = {"half": "vector"}
OPERATIONAL = {"half": "operational"}


class ConfigModel(BaseModel):
    # allow_inf_nan=False: every float field of every section refuses .inf and .nan (YAML spells them so);
    # subclasses' own ConfigDicts are merged with this one, so no section can forget it.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
