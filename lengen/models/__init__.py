"""Models: the Transformer stack, the CHE encoder wrapper."""

from lengen.models.che import CHEModel
from lengen.models.config import ModelConfig
from lengen.models.transformer import Transformer

__all__ = ["CHEModel", "ModelConfig", "Transformer"]
