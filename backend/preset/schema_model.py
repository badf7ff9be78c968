"""Preset sections: where the model comes from (``model``) and the training environment."""

from __future__ import annotations

import re
from typing import Literal, get_args

from pydantic import (
    Field,
    field_validator,
    model_validator,
)

from backend.i18n import _
from backend.preset.grammar import (
    check_apt_package,
    check_env_keys,
    check_host,
    check_image_ref,
    check_no_option,
    check_pip_requirement,
    check_repo_id,
    check_url,
)
from backend.preset.hostpaths import model_dir_problem
from backend.preset.schema_base import _Strict

TinyFamily = Literal["llama2", "llama3", "qwen2", "mistral", "gemma2"]
TINY_FAMILIES: tuple[str, ...] = get_args(TinyFamily)
TINY_MIN_VOCAB = 384  # a family other than llama2: 256 bytes + its special tokens + merges


class TinyModelSpec(_Strict):
    """A random-weight model made locally, for the embedded default and for GPU proofs."""

    family: TinyFamily = Field(
        "llama2",
        description=(
            "whose tokenizer, chat template and config the tiny model copies (vocabulary trained "
            "on the sample conversations): llama2 = sentencepiece LlamaTokenizer, no chat "
            "template, <unk> (the default, as before); llama3 = byte-level BPE, "
            "<|begin_of_text|> added, <|eot_id|> ends a turn, no unk and no pad token, "
            "grouped-query attention; qwen2 = byte-level BPE, no BOS, ChatML "
            "(<|im_start|>/<|im_end|>), pad <|endoftext|>, tied embeddings; mistral = "
            "sentencepiece-like BPE with byte fallback, <s> added, [INST] ... [/INST], "
            "sliding window; gemma2 = sentencepiece-like, <bos> added, <pad>, "
            "<start_of_turn>/<end_of_turn>, soft-capped logits, tied embeddings. Every family "
            "but llama2 writes its chat template into the tokenizer, halves the key/value heads "
            "when num_key_value_heads is unset, and needs vocab_size >= 384"
        ),
    )
    hidden_size: int = Field(64, gt=0, le=65536)
    intermediate_size: int = Field(176, gt=0, le=262144)
    num_hidden_layers: int = Field(2, gt=0, le=1024)
    num_attention_heads: int = Field(4, gt=0, le=1024)
    num_key_value_heads: int | None = Field(None, gt=0, le=1024)
    vocab_size: int = Field(512, ge=64, le=2**20)
    max_position_embeddings: int = Field(512, gt=0, le=2**20)
    seed: int = Field(0, ge=0, le=2**32 - 1)

    @model_validator(mode="after")
    def _family_fits(self) -> TinyModelSpec:
        if self.family != "llama2" and self.vocab_size < TINY_MIN_VOCAB:
            # English only: a new catalog entry belongs to the locale files (scripts/i18n.py)
            raise ValueError(
                f"tiny family {self.family} needs vocab_size >= {TINY_MIN_VOCAB} (256 byte "
                f"tokens, its special tokens and some merges); got {self.vocab_size}"
            )
        return self


class ModelSource(_Strict):
    """Where the weights come from and where they live on the host."""

    source: Literal["hf", "git_lfs", "local", "tiny", "modelscope"] = "hf"
    repo: str | None = Field(None, description="Hugging Face repo id, e.g. lmsys/vicuna-13b-v1.3")
    revision: str = "main"
    endpoint: str | None = Field(
        None, description="Hub endpoint; a mirror such as https://hf-mirror.com for users in China"
    )
    token_env: str = Field(
        "HF_TOKEN",
        description="name of the environment variable holding the token (never the token)",
    )
    git_url: str | None = Field(None, description="URL for a git-lfs clone (the seed's way)")
    dir: str = Field(..., description="host directory holding (or receiving) the model")
    prefer_safetensors: bool = True
    tiny: TinyModelSpec | None = None

    @field_validator("repo")
    @classmethod
    def _repo_id(cls, value: str | None) -> str | None:
        return check_repo_id(value) if value is not None else None

    @field_validator("revision", "token_env")
    @classmethod
    def _not_option(cls, value: str) -> str:
        return check_no_option(value)

    @field_validator("endpoint", "git_url")
    @classmethod
    def _urls(cls, value: str | None) -> str | None:
        return check_url(value, git=True) if value is not None else None

    @field_validator("token_env")
    @classmethod
    def _env_name(cls, value: str) -> str:
        check_env_keys({value: ""})
        return value

    @field_validator("dir")
    @classmethod
    def _not_a_system_dir(cls, value: str) -> str:
        """Refused on load, not at the prepare step of a run already started."""
        problem = model_dir_problem(value)
        if problem:
            raise ValueError(problem)
        return value

    @model_validator(mode="after")
    def _source_needs(self) -> ModelSource:
        if self.source == "hf" and not self.repo:
            raise ValueError(_("source 'hf' needs 'repo' (e.g. lmsys/vicuna-13b-v1.3)"))
        if self.source == "modelscope" and not self.repo:
            raise ValueError(_("source 'modelscope' needs 'repo' (its ModelScope id, owner/name)"))
        if self.source == "git_lfs" and not (self.git_url or self.repo):
            raise ValueError(_("source 'git_lfs' needs 'git_url' or 'repo'"))
        if self.source == "tiny" and self.tiny is None:
            self.tiny = TinyModelSpec()
        return self

    def clone_url(self) -> str:
        endpoint = (self.endpoint or "https://huggingface.co").rstrip("/")
        return self.git_url or f"{endpoint}/{self.repo}"


class FastChatInstall(_Strict):
    """How FastChat gets into the environment: a PyPI pin, or an editable clone (the seed)."""

    source: Literal["pypi", "editable"] = "pypi"
    spec: str = "fschat==0.2.36"
    path: str | None = Field(None, description="clone path for 'editable' (seed: /app/FastChat)")
    git_url: str = "https://github.com/lm-sys/FastChat.git"

    @field_validator("git_url")
    @classmethod
    def _url(cls, value: str) -> str:
        return check_url(value, git=True)

    @field_validator("spec")
    @classmethod
    def _spec(cls, value: str) -> str:
        return check_pip_requirement(value)


class FlashAttnPolicy(_Strict):
    install: Literal["auto", "always", "never"] = Field(
        "auto", description="auto: when the GPUs are sm80+ and the image lacks it"
    )
    no_build_isolation: bool = Field(True, description="the seed's fix for No module named 'torch'")
    max_jobs: int | None = Field(
        None, gt=0, le=1024, description="MAX_JOBS for nvcc; None sizes it to RAM"
    )
    index_url: str | None = Field(None, description="a separate index for flash-attn only")

    @field_validator("index_url")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        return check_url(value) if value is not None else None


class EnvironmentConfig(_Strict):
    """The image and what gets installed into it."""

    image: str = "pytorch/pytorch:2.5.1-cuda12.4-cudnn9-devel"
    mode: Literal["image", "in_container"] = Field(
        "image",
        description="image: build a cached environment image once; in_container: pip-install "
        "inside the running container every time, as the seed does",
    )
    pip_index_url: str | None = None
    pip_extra_index_urls: list[str] = Field(default_factory=list)
    pip_trusted_hosts: list[str] = Field(default_factory=list)
    pip_cert: str | None = Field(
        None, description="CA bundle for pip (host path); None: PIP_CERT or the host's pip config"
    )
    find_links: list[str] = Field(
        default_factory=list,
        description="local wheel directories (pip --find-links); docker builds copy the wheels "
        "the install needs into the build context",
    )
    torch_spec: str | None = Field(
        None,
        description="pip requirement for torch when the image has none (e.g. torch==2.13.0); "
        "None keeps the image's torch",
    )
    upgrade_pip: bool = False
    apt_packages: list[str] = Field(default_factory=lambda: ["git"])
    fastchat: FastChatInstall = Field(default_factory=FastChatInstall)
    transformers: str = Field(
        "4.57.6", description="transformers version installed and targeted by the flag names"
    )
    extra_packages: list[str] = Field(default_factory=lambda: ["accelerate", "einops"])
    deepspeed: bool = False
    flash_attn: FlashAttnPolicy = Field(default_factory=FlashAttnPolicy)
    fsdp_state_dict_patch: bool = Field(
        False, description="the seed's .cpu() patch to torch 2.0.x's FSDP _state_dict_utils.py"
    )
    venv: str | None = Field(None, description="host runner: python env to use (None: build one)")

    @field_validator("transformers")
    @classmethod
    def _version_like(cls, value: str) -> str:
        if not re.fullmatch(r"\d+\.\d+(\.\d+)?([.-]?\w+)?", value):
            raise ValueError(_("'{value}' is not a version like 4.57.6").format(value=value))
        return value

    @field_validator("image")
    @classmethod
    def _image(cls, value: str) -> str:
        return check_image_ref(value)

    @field_validator("pip_index_url")
    @classmethod
    def _index(cls, value: str | None) -> str | None:
        return check_url(value) if value is not None else None

    @field_validator("pip_extra_index_urls")
    @classmethod
    def _extra_index(cls, value: list[str]) -> list[str]:
        return [check_url(v) for v in value]

    @field_validator("apt_packages")
    @classmethod
    def _apt(cls, value: list[str]) -> list[str]:
        return [check_apt_package(v) for v in value]

    @field_validator("extra_packages")
    @classmethod
    def _extras(cls, value: list[str]) -> list[str]:
        return [check_pip_requirement(v) for v in value]

    @field_validator("torch_spec")
    @classmethod
    def _torch(cls, value: str | None) -> str | None:
        return check_pip_requirement(value) if value is not None else None

    @field_validator("pip_trusted_hosts")
    @classmethod
    def _hosts(cls, value: list[str]) -> list[str]:
        return [check_host(v) for v in value]
