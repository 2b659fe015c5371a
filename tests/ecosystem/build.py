"""The tiny models, tokenizers, pipelines and data the ecosystem runs train on.

Nothing is downloaded: every model is built from a config with a fixed seed and saved with
``save_pretrained``, the tokenizers are built from a vocabulary written here, and the data
is generated (JSON lines that ``datasets.load_dataset`` reads from a folder, and PNG image
folders). Both engines' runs read the same files, built once per cache by :func:`build_all`,
in a process that has ``.ecosystem/site`` on its path (``transformers``, ``diffusers``,
``datasets``).

    python -m tests.ecosystem.build OUT
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

_WORDS = (
    "the a one two three four five six seven eight nine ten red green blue cat dog bird fish "
    "runs sits eats sees big small fast slow yes no is are and or answer question please "
    "count to say word good bad left right up down"
)
WORDS = _WORDS.split()
SPECIALS = ("<pad>", "<s>", "</s>", "<unk>")


def word_vocabulary() -> dict[str, int]:
    """The causal model's vocabulary: the special tokens, then ``WORDS``."""
    return {token: i for i, token in enumerate([*SPECIALS, *WORDS])}


def sentences(count: int, seed: int, low: int = 4, high: int = 10) -> list[str]:
    """``count`` sentences of ``WORDS``, the same for the same seed."""
    rng = random.Random(seed)
    return [
        " ".join(rng.choice(WORDS) for _ in range(rng.randint(low, high))) for _ in range(count)
    ]


def _write_jsonl(folder: Path, rows: list[dict[str, str]], name: str = "train.jsonl") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


def text_data(folder: Path, count: int = 32) -> Path:
    """Plain language-modelling data (``text``), as TRL's SFT reads it."""
    return _write_jsonl(folder, [{"text": s} for s in sentences(count, seed=1)])


def preference_data(folder: Path, count: int = 16) -> Path:
    """Preference pairs (``prompt``, ``chosen``, ``rejected``), as TRL's DPO reads them."""
    prompts, good, bad = (sentences(count, seed=s, low=2, high=5) for s in (2, 3, 4))
    rows = [{"prompt": p, "chosen": c, "rejected": r} for p, c, r in zip(prompts, good, bad)]
    return _write_jsonl(folder, rows)


def prompt_data(folder: Path, count: int = 8) -> Path:
    """Prompts only (``prompt``), as TRL's GRPO reads them."""
    return _write_jsonl(folder, [{"prompt": s} for s in sentences(count, seed=5, low=2, high=4)])


REWARD_MODULE = '''\
"""A plain Python reward for GRPO: completions that say "yes" and stay short score higher."""


def yes_reward(completions, **kwargs):
    return [c.count("yes") - 0.1 * len(c.split()) for c in completions]
'''


def causal_model(folder: Path) -> Path:
    """A two-layer Llama (hidden 16) and its word-level tokenizer, saved to ``folder``."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    vocab = word_vocabulary()
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
        unk_token="<unk>",
        model_max_length=64,
    )
    config = LlamaConfig(
        vocab_size=len(vocab),
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=128,
        pad_token_id=vocab["<pad>"],
        bos_token_id=vocab["<s>"],
        eos_token_id=vocab["</s>"],
    )
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def images(folder: Path, count: int = 8, size: int = 16, captions: bool = False) -> Path:
    """``count`` random RGB PNGs of ``size`` pixels (an image folder ``datasets`` reads;
    with ``captions``, a ``metadata.jsonl`` naming each image's ``text``)."""
    import numpy as np
    from PIL import Image

    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(7)
    rows = []
    for i, text in enumerate(sentences(count, seed=6, low=2, high=4)):
        pixels = rng.integers(0, 256, size=(size, size, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(folder / f"{i:02d}.png")
        rows.append({"file_name": f"{i:02d}.png", "text": text})
    if captions:
        _write_jsonl(folder, rows, "metadata.jsonl")
    return folder


def unconditional_unet(folder: Path, size: int = 16) -> Path:
    """The config of a two-block ``UNet2DModel`` (channels 8 and 16) for
    ``train_unconditional.py --model_config_name_or_path``."""
    from diffusers import UNet2DModel

    unet = UNet2DModel(
        sample_size=size,
        in_channels=3,
        out_channels=3,
        layers_per_block=1,
        block_out_channels=(8, 16),
        down_block_types=("DownBlock2D", "AttnDownBlock2D"),
        up_block_types=("AttnUpBlock2D", "UpBlock2D"),
        norm_num_groups=4,
        attention_head_dim=8,
    )
    unet.save_config(folder)
    return folder


def clip_tokenizer(folder: Path) -> Path:
    """A CLIP BPE tokenizer over ``WORDS`` (every word one token), saved to ``folder``."""
    from transformers import CLIPTokenizer

    letters = sorted({c for w in WORDS for c in w})
    tokens = [*letters, *(c + "</w>" for c in letters)]
    merges: list[str] = []
    for word in WORDS:  # merge each word left to right into one token ending in </w>
        pieces = [*word[:-1], word[-1] + "</w>"]
        while len(pieces) > 1:
            merges.append(f"{pieces[0]} {pieces[1]}")
            pieces = [pieces[0] + pieces[1], *pieces[2:]]
            tokens.append(pieces[0])
    vocab = {
        t: i for i, t in enumerate(dict.fromkeys([*tokens, "<|startoftext|>", "<|endoftext|>"]))
    }
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "vocab.json").write_text(json.dumps(vocab))
    (folder / "merges.txt").write_text("#version: 0.2\n" + "\n".join(dict.fromkeys(merges)) + "\n")
    tokenizer = CLIPTokenizer(
        str(folder / "vocab.json"), str(folder / "merges.txt"), model_max_length=8
    )
    tokenizer.save_pretrained(folder)
    return folder


def stable_diffusion(folder: Path) -> Path:
    """A Stable Diffusion pipeline of tiny parts (a two-block UNet and VAE with channels 4
    and 8, a two-layer CLIP text encoder of width 32), saved to ``folder``."""
    import torch
    from diffusers import (
        AutoencoderKL,
        DDPMScheduler,
        StableDiffusionPipeline,
        UNet2DConditionModel,
    )
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTokenizer

    tokenizer = CLIPTokenizer.from_pretrained(clip_tokenizer(folder.parent / "clip-vocab"))
    torch.manual_seed(0)
    unet = UNet2DConditionModel(
        block_out_channels=(8, 16),
        layers_per_block=1,
        sample_size=8,
        in_channels=4,
        out_channels=4,
        down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"),
        up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"),
        cross_attention_dim=32,
        attention_head_dim=4,
        norm_num_groups=4,
    )
    vae = AutoencoderKL(
        block_out_channels=[4, 8],
        in_channels=3,
        out_channels=3,
        down_block_types=["DownEncoderBlock2D", "DownEncoderBlock2D"],
        up_block_types=["UpDecoderBlock2D", "UpDecoderBlock2D"],
        latent_channels=4,
        norm_num_groups=2,
        sample_size=16,
    )
    text_encoder = CLIPTextModel(
        CLIPTextConfig(
            bos_token_id=tokenizer.bos_token_id,
            eos_token_id=tokenizer.eos_token_id,
            pad_token_id=tokenizer.pad_token_id,
            hidden_size=32,
            intermediate_size=37,
            num_attention_heads=4,
            num_hidden_layers=2,
            vocab_size=len(tokenizer),
            max_position_embeddings=8,
        )
    )
    scheduler = DDPMScheduler(num_train_timesteps=100)
    pipeline = StableDiffusionPipeline(
        vae=vae,
        text_encoder=text_encoder,
        tokenizer=tokenizer,
        unet=unet,
        scheduler=scheduler,
        safety_checker=None,
        feature_extractor=None,
        requires_safety_checker=False,
    )
    pipeline.save_pretrained(folder)
    return folder


def asset_paths(root: Path) -> dict[str, Path]:
    """Where :func:`build_all` puts each asset under ``root``."""
    return {
        "llama": root / "tiny-llama",
        "sft_data": root / "data-sft",
        "dpo_data": root / "data-dpo",
        "grpo_data": root / "data-grpo",
        "rewards": root / "rewards",
        "unet_config": root / "tiny-unet",
        "images": root / "images",
        "captioned": root / "images-captioned",
        "sd": root / "tiny-sd",
    }


def build_all(root: Path) -> dict[str, Path]:
    """Every asset under ``root`` (built once: a finished build leaves ``root/.built``)."""
    paths = asset_paths(root)
    if (root / ".built").is_file():
        return paths
    causal_model(paths["llama"])
    text_data(paths["sft_data"])
    preference_data(paths["dpo_data"])
    prompt_data(paths["grpo_data"])
    paths["rewards"].mkdir(parents=True, exist_ok=True)
    (paths["rewards"] / "rewards.py").write_text(REWARD_MODULE)
    unconditional_unet(paths["unet_config"])
    images(paths["images"])
    images(paths["captioned"], captions=True)
    stable_diffusion(paths["sd"])
    (root / ".built").write_text("ok\n")
    return paths


if __name__ == "__main__":
    print(json.dumps({k: str(v) for k, v in build_all(Path(sys.argv[1])).items()}, indent=1))
