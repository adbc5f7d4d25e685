from .transformer_attn import (  # noqa: F401
    ARCHITECTURES,
    AttnTransformerModel,
    attn_architectures,
    is_attn_arch,
    register_variant,
)
