"""A learned absolute table with max_position rows. It cannot read positions it has no row for,
so randomized training needs max_position >= the largest sampled position."""

from torch import nn

from lengen.encodings.base import PositionalEncoding
from lengen.errors import LengenError


class LearnedEncoding(PositionalEncoding):
    accepts_float_positions = False

    def __init__(self, cfg):
        super().__init__(cfg)
        self.table = nn.Embedding(cfg.max_position, cfg.d_model)

    @property
    def position_table_size(self):
        return self.table.num_embeddings

    def check_positions(self, pos):
        super().check_positions(pos)
        lo, hi = int(pos.min()), int(pos.max())
        if lo < 0 or hi >= self.table.num_embeddings:
            bad = hi if hi >= self.table.num_embeddings else lo
            raise LengenError(
                f"learned position table has {self.table.num_embeddings} rows (max_position), "
                f"but position {bad} was asked for; raise --max-position or use a shorter length"
            )

    def embed(self, x, pos):
        return x + self.table(pos.long()).to(x.dtype)
