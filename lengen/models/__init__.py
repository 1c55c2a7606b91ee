"""Models: the Transformer stack, the CHE encoder wrapper, the CHE benchmark's recurrent baselines."""

from lengen.models.che import CHEModel
from lengen.models.config import ARCHITECTURES, ModelConfig
from lengen.models.recurrent import build_model
from lengen.models.transformer import Transformer

__all__ = ["ARCHITECTURES", "CHEModel", "ModelConfig", "Transformer", "build_model"]
