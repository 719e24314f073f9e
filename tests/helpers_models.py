"""A tiny sentence-transformers model built here in about a second: a 2-layer BERT (hidden 32) with a
WordPiece vocabulary of ~2,000 pieces trained on the sample corpus. Real weights, a real tokenizer and the
real sentence-transformers layout (Transformer → mean Pooling → Normalize), so loading, encoding and
model2vec's distillation run the same code as for all-MiniLM-L6-v2, at a fraction of the cost."""

from __future__ import annotations

from pathlib import Path

SAMPLE = Path(__file__).resolve().parents[1] / "src" / "reindex" / "sample" / "corpus"
TINY_HIDDEN = 32


def build_tiny_model(folder: Path, *, vocab_size: int = 2000, seed: int = 0) -> Path:
    """Write the tiny model into ``folder`` (created) and return it."""
    import torch
    from sentence_transformers import SentenceTransformer, models
    from tokenizers import Tokenizer, decoders, normalizers, pre_tokenizers, processors
    from tokenizers.models import WordPiece
    from tokenizers.trainers import WordPieceTrainer
    from transformers import BertConfig, BertModel, PreTrainedTokenizerFast

    folder = Path(folder)
    hf_dir = folder / "hf"
    hf_dir.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    special = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    texts = [p.read_text(encoding="utf-8", errors="replace") for p in sorted(SAMPLE.iterdir()) if p.is_file()]
    tok.train_from_iterator(texts, WordPieceTrainer(vocab_size=vocab_size, special_tokens=special, show_progress=False))
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B [SEP]",
                                                       special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]",
                                   sep_token="[SEP]", mask_token="[MASK]", model_max_length=128)
    fast.save_pretrained(str(hf_dir))
    torch.manual_seed(seed)
    config = BertConfig(vocab_size=tok.get_vocab_size(), hidden_size=TINY_HIDDEN, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=64, max_position_embeddings=130)
    BertModel(config).save_pretrained(str(hf_dir))
    word = models.Transformer(str(hf_dir), max_seq_length=128)
    pooling = models.Pooling(word.get_embedding_dimension(), pooling_mode="mean")
    out = folder / "model"
    SentenceTransformer(modules=[word, pooling, models.Normalize()], device="cpu").save(str(out))
    return out
