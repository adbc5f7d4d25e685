from .transformer_attn import ARCHITECTURES, AttnTransformerModel, register_variant  # noqa: F401
