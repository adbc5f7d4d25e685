"""A tiny COMET checkpoint built on the spot, offline: an XLM-R-shaped encoder of a few
small layers from a config (random weights, fixed seed), a sentencepiece tokenizer
trained on the test corpus, and COMET's own ``RegressionMetric`` saved by
PyTorch Lightning as COMET's training saves it (``checkpoints/model.ckpt`` beside
``hparams.yaml``). Its scores mean nothing; loading and scoring it run the real code."""

import os
from typing import Sequence


def build_tiny_comet(out_dir: str, corpus: Sequence[str], seed: int = 7) -> str:
    """Write the checkpoint under ``out_dir``; returns the path of ``model.ckpt``."""
    import importlib
    import io

    import pytorch_lightning as ptl
    import sentencepiece as spm
    import torch
    from comet.models import RegressionMetric
    from pytorch_lightning.core.saving import save_hparams_to_yaml
    from transformers import XLMRobertaConfig, XLMRobertaTokenizer, XLMRobertaTokenizerFast

    encoder_dir = os.path.join(out_dir, "encoder")
    os.makedirs(encoder_dir, exist_ok=True)
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(corpus), model_writer=model, vocab_size=120,
                                   model_type="unigram", hard_vocab_limit=False, character_coverage=1.0, num_threads=1,
                                   bos_id=0, pad_id=1, eos_id=2, unk_id=3, minloglevel=2)
    spm_path = os.path.join(encoder_dir, "sentencepiece.bpe.model")
    with open(spm_path, "wb") as f:
        f.write(model.getvalue())
    slow = XLMRobertaTokenizer(vocab_file=spm_path)
    # the conversion to the fast tokenizer COMET loads reads the sentencepiece model's
    # protobuf: sentencepiece >= 0.2.1 ships a parser for protobuf >= 5, COMET pins
    # protobuf < 5, so the conversion uses the parser transformers ships for protobuf 4
    convert_slow_tokenizer = importlib.import_module("transformers.convert_slow_tokenizer")
    from transformers.utils import sentencepiece_model_pb2_new
    saved = convert_slow_tokenizer.import_protobuf
    convert_slow_tokenizer.import_protobuf = lambda error_message="": sentencepiece_model_pb2_new
    try:
        fast = XLMRobertaTokenizerFast(vocab_file=spm_path, from_slow=True)
    finally:
        convert_slow_tokenizer.import_protobuf = saved
    fast.save_pretrained(encoder_dir)
    XLMRobertaConfig(vocab_size=len(slow), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=64, max_position_embeddings=130, type_vocab_size=1,
                     pad_token_id=1, bos_token_id=0, eos_token_id=2).save_pretrained(encoder_dir)
    torch.manual_seed(seed)
    metric = RegressionMetric(pretrained_model=encoder_dir, load_pretrained_weights=False,
                              local_files_only=True, hidden_sizes=[16], batch_size=4,
                              layer="mix", layer_transformation="softmax", dropout=0.1)
    trainer = ptl.Trainer(accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                          enable_progress_bar=False, enable_model_summary=False)
    trainer.strategy.connect(metric)
    ckpt = os.path.join(out_dir, "checkpoints", "model.ckpt")
    os.makedirs(os.path.dirname(ckpt), exist_ok=True)
    trainer.save_checkpoint(ckpt)
    save_hparams_to_yaml(os.path.join(out_dir, "hparams.yaml"), metric.hparams)
    return ckpt
