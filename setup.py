from setuptools import find_packages, setup

setup(
    name="fairseq_attn_plugins",
    version="0.1.0",
    description="Improved self-attention for fairseq machine translation (CSAN, relative "
                "positions, DiSAN, DropAttention, chained and convoluted attention)",
    packages=find_packages(include=["fairseq_attn_plugins", "fairseq_attn_plugins.*", "fairseq_attn_recipes"]),
    python_requires=">=3.8",
    # fairseq itself is NOT listed: it must be installed with --no-deps
    # (ve-fairseq==0.12.3 on Python >= 3.11, fairseq==0.12.2 before); see README.
    install_requires=[
        "torch>=2.0",
        "hydra-core>=1.0.7,<1.4",
        "omegaconf<2.4",
        "sacrebleu>=2.0",
        "numpy",
    ],
    extras_require={
        # COMET scores (reporting/comet.py). unbabel-comet pins numpy < 2 and protobuf < 5
        # (pip installs numpy 1.26 beside torch 2.13, which supports it); its torchmetrics
        # 0.10 imports pkg_resources, which setuptools >= 81 no longer ships.
        "comet": ["unbabel-comet>=2.2,<3", "setuptools<81"],
    },
    entry_points={
        "console_scripts": [
            "fairseq-attn-demo = fairseq_attn_plugins.cli.demo:main",
            "fairseq-attn-significance = fairseq_attn_plugins.cli.significance:main",
            "fairseq-attn-results = fairseq_attn_plugins.cli.results:main",
            "fairseq-attn-bench = fairseq_attn_plugins.cli.bench:main",
            "fairseq-attn-plot = fairseq_attn_plugins.cli.plot:main",
            "fairseq-attn-paper = fairseq_attn_plugins.cli.paper:main",
            "fairseq-attn-export = fairseq_attn_plugins.cli.export:main",
            "fairseq-attn-pieces = fairseq_attn_plugins.cli.pieces:main",
        ]
    },
)
