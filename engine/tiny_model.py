"""The tiny-model kit: a seeded random Llama that the CPU vLLM engine accepts, plus sample adapters.

Run with the engine's interpreter (it needs torch and transformers):
    .venv-engine/bin/python -m engine.tiny_model --out var/tiny
Writes DIR/base/ (config, safetensors weights, a locally trained tokenizer with a chat template) and
DIR/adapters/<name>/ (see engine.sample_adapters). A stamp makes a second run a fast no-op.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import shutil
import sys
import time
from pathlib import Path

from engine.sample_adapters import (
    SAMPLE_ADAPTERS,
    TINY_BASE_MODEL_NAME,
    TINY_NUM_LAYERS,
    write_sample_adapters,
)

DEFAULT_SEED = 1234
VOCAB_SIZE = 512
STAMP_NAME = ".tiny-model-stamp"

SPECIAL_TOKENS = [
    "<unk>",
    "<s>",
    "</s>",
    "<pad>",
    "<|system|>",
    "<|user|>",
    "<|assistant|>",
    "<|end|>",
]

# Role markers and an end marker per message; the generation prompt opens an assistant turn.
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{{ '<|' + message['role'] + '|>\n' + message['content'] + '<|end|>\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% endif %}"
)

# A small built-in corpus: the tokenizer only needs enough text to learn ~250 byte-pair merges.
CORPUS = """
The quick brown fox jumps over the lazy dog. A journey of a thousand miles begins with one step.
Tenants upload adapters, reviewers approve them, and workers place them on engines near the users.
An engine keeps one base model in memory and swaps small adapters in and out of its cache.
When a request arrives, the gateway chooses the engine where the adapter is already resident.
Hello! How are you today? I am fine, thank you. What would you like to talk about?
Please write a short poem about the sea, the sky, the wind and the morning light on the water.
The weather is sunny with a light breeze; tomorrow there will be rain in the north and the west.
Numbers: one, two, three, four, five, six, seven, eight, nine, ten, eleven, twelve, twenty, hundred.
Support team: your order has shipped and should arrive within three to five business days.
Summarize the following text in one sentence, then translate the summary into plain English.
Every version of an adapter has its own name and its own path, so nothing is reloaded in place.
The library opens at nine in the morning and closes at six in the evening on every weekday.
She said that the results of the experiment were clear, and the report would follow next week.
Good morning, good afternoon, good evening, good night. Thanks for reading, and see you soon.
Digits and signs: 0 1 2 3 4 5 6 7 8 9, 10% off; (a) "quoted" text - 'single' [brackets] {braces}.
Questions: who, what, where, when, why and how? Answers: yes, no, maybe, always, never, sometimes.
A cat sat on the mat while the dog slept by the door; the bird sang a song in the old green tree.
Engineers measure latency, throughput and memory, then write the numbers down next to the goals.
Small models are fast to load and easy to test, but they only babble words they have never seen.
Colors: red, orange, yellow, green, blue, purple, black, white, brown, pink, gray, silver, gold.
Days: Monday, Tuesday, Wednesday, Thursday, Friday, Saturday, Sunday; months: January to December.
"""


def _kit_fingerprint(seed: int) -> str:
    """Hash of the kit's sources and the seed: a changed kit rebuilds, an unchanged one skips."""
    digest = hashlib.sha256(f"seed={seed}\n".encode())
    here = Path(__file__).resolve().parent
    for name in ("tiny_model.py", "sample_adapters.py"):
        digest.update((here / name).read_bytes())
    return digest.hexdigest()


def is_complete(out: Path, seed: int = DEFAULT_SEED) -> bool:
    """True when `out` holds a finished build of this kit version with this seed."""
    stamp = out / STAMP_NAME
    return stamp.is_file() and stamp.read_text().strip() == _kit_fingerprint(seed)


def build_tokenizer(base_dir: Path) -> int:
    """Train a byte-level BPE tokenizer on CORPUS, save it with the chat template; return size."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    # No full byte alphabet on purpose: every token is then printable ASCII learned from CORPUS,
    # so whatever a random model generates decodes to visible text (lone UTF-8 continuation
    # bytes would decode to nothing and make base and adapter replies hard to tell apart).
    # Bytes outside the corpus map to <unk>.
    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=SPECIAL_TOKENS,
        show_progress=False,
    )
    # Whole text, newlines included: the chat template puts "\n" after every role marker.
    tokenizer.train_from_iterator([CORPUS] * 4, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        unk_token="<unk>",
        bos_token="<s>",
        eos_token="<|end|>",
        pad_token="<pad>",
        model_max_length=2048,
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(str(base_dir))
    return len(fast)


def build_base_model(base_dir: Path, *, seed: int, tokenizer_size: int) -> None:
    """Save a seeded random LlamaForCausalLM whose head_dim is 64 (the CPU kernels refuse 16)."""
    import torch
    from transformers import (
        GenerationConfig,
        LlamaConfig,
        LlamaForCausalLM,
        PreTrainedTokenizerFast,
    )

    tokenizer = PreTrainedTokenizerFast.from_pretrained(str(base_dir))
    config = LlamaConfig(
        vocab_size=max(VOCAB_SIZE, tokenizer_size),
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=TINY_NUM_LAYERS,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=64,
        max_position_embeddings=2048,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=False,
        dtype="float32",
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    model.eval()
    model.save_pretrained(str(base_dir))
    GenerationConfig(
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    ).save_pretrained(str(base_dir))


def build(out: Path, *, seed: int = DEFAULT_SEED, force: bool = False) -> Path:
    """Build the kit into `out` unless it is already complete; return `out`.

    A lock file serialises concurrent builders (two test sessions, `make run` beside `make test`);
    the parts are built in a scratch directory and moved into place before the stamp is written,
    so a killed build never looks complete.
    """
    out.mkdir(parents=True, exist_ok=True)
    with open(out / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not force and is_complete(out, seed):
            return out
        (out / STAMP_NAME).unlink(missing_ok=True)
        scratch = out / ".build"
        shutil.rmtree(scratch, ignore_errors=True)
        (scratch / "base").mkdir(parents=True)
        size = build_tokenizer(scratch / "base")
        build_base_model(scratch / "base", seed=seed, tokenizer_size=size)
        write_sample_adapters(scratch / "adapters")
        for part in ("base", "adapters"):
            shutil.rmtree(out / part, ignore_errors=True)
            (scratch / part).rename(out / part)
        scratch.rmdir()
        (out / STAMP_NAME).write_text(_kit_fingerprint(seed) + "\n")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path, help="directory to build into")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    parser.add_argument("--force", action="store_true", help="rebuild even if complete")
    args = parser.parse_args(argv)
    started = time.monotonic()
    fresh = args.force or not is_complete(args.out, args.seed)
    build(args.out, seed=args.seed, force=args.force)
    summary = {
        "out": str(args.out.resolve()),
        "base_model_name": TINY_BASE_MODEL_NAME,
        "base": str((args.out / "base").resolve()),
        "adapters": sorted(SAMPLE_ADAPTERS),
        "built": fresh,
        "seconds": round(time.monotonic() - started, 2),
    }
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
