"""Tiny random vision-language models built from local configs (nothing downloaded), their
processors, and a ChatML tokenizer whose special tokens they know: a Qwen2-VL
(``Qwen2VLForConditionalGeneration``) and a LLaVA (``LlavaForConditionalGeneration``: a CLIP
vision tower, a Llama text model)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.support.tokenizers_local import chat_folder


def qwen_tokenizer(folder: Path) -> tuple[Path, dict[str, int]]:
    """A ChatML tokenizer saved with its template (images as Qwen2-VL's <|vision_start|>
    <|image_pad|><|vision_end|>), and the ids of those tokens."""
    from transformers import AutoTokenizer

    chat_folder(folder, "chatml", generation=False)
    tok = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    ids = {
        t: tok.convert_tokens_to_ids(t)
        for t in ("<|image_pad|>", "<|vision_start|>", "<|vision_end|>", "<pad>")
    }
    return folder, {**ids, "vocab": len(tok)}


def qwen_processor(max_pixels: int = 112 * 112) -> Any:
    from transformers import Qwen2VLImageProcessor

    return Qwen2VLImageProcessor(min_pixels=28 * 28, max_pixels=max_pixels)


def qwen_model(ids: dict[str, int]) -> Any:
    """A Qwen2-VL of one layer a tower, 32 wide, the tokenizer's image tokens."""
    import torch
    from transformers import Qwen2VLConfig, Qwen2VLForConditionalGeneration

    cfg = Qwen2VLConfig(
        text_config=dict(
            vocab_size=ids["vocab"], hidden_size=32, intermediate_size=64, num_hidden_layers=2,
            num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=4096,
            rope_parameters={"rope_type": "default", "mrope_section": [2, 3, 3], "rope_theta": 10000.0},
            bos_token_id=None, eos_token_id=None, pad_token_id=ids["<pad>"],
        ),
        vision_config=dict(
            depth=1, embed_dim=32, hidden_size=32, num_heads=2, mlp_ratio=2, patch_size=14,
            spatial_merge_size=2, temporal_patch_size=2, in_channels=3,
        ),
        image_token_id=ids["<|image_pad|>"], video_token_id=ids["<pad>"],
        vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"],
    )  # fmt: skip
    torch.manual_seed(0)
    return Qwen2VLForConditionalGeneration(cfg).eval()


def llava_processor(side: int = 56) -> Any:
    from transformers import CLIPImageProcessor

    return CLIPImageProcessor(
        size={"shortest_edge": side}, crop_size={"height": side, "width": side}
    )


def llava_model(ids: dict[str, int], side: int = 56) -> Any:
    """A LLaVA: a CLIP tower of ``side``-pixel images in 14-pixel patches ((side/14)**2
    tokens an image, the CLS dropped), a Llama of two layers."""
    import torch
    from transformers import (
        CLIPVisionConfig,
        LlamaConfig,
        LlavaConfig,
        LlavaForConditionalGeneration,
    )

    cfg = LlavaConfig(
        vision_config=CLIPVisionConfig(
            hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
            image_size=side, patch_size=14,
        ),
        text_config=LlamaConfig(
            vocab_size=ids["vocab"], hidden_size=32, intermediate_size=64, num_hidden_layers=2,
            num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=4096,
            bos_token_id=None, eos_token_id=None, pad_token_id=ids["<pad>"],
        ),
        image_token_id=ids["<|image_pad|>"], image_seq_length=(side // 14) ** 2,
        vision_feature_layer=-1,
    )  # fmt: skip
    torch.manual_seed(0)
    return LlavaForConditionalGeneration(cfg).eval()
