# Sourced by scripts/test.sh: the Python virtual environment of the Hugging
# Face tests (tests/hf): Debian's python3 with its torch (the venv sees the
# system's site-packages: torch, numpy, regex, yaml, requests) plus a
# transformers release that works with torch 1.13, its remaining
# dependencies and sentencepiece (for transformers' LlamaTokenizer), and
# the tensorboard package with what its event reader imports (protobuf,
# absl-py) for tests/tensorboard, every version pinned and installed with
# --no-deps, so nothing else is pulled in or upgraded.
#
#   tgc_hf_venv DIR      creates DIR, or reuses it when it holds these pins
#   tgc_hf_venv_link L   the venv in a cache directory keyed by the pins
#                        (${XDG_CACHE_HOME:-~/.cache}/tgc/hf-venv-KEY, kept
#                        across fresh builds), linked as L (build/hf-venv)

TGC_HF_PIP="transformers==4.43.4 tokenizers==0.19.1 huggingface-hub==0.36.2 safetensors==0.8.0 hf-xet==1.8.0 fsspec==2026.9.0 filelock==4.3.1 packaging==26.4 tqdm==4.70.1 sentencepiece==0.2.0 tensorboard==2.21.0 protobuf==6.33.0 absl-py==2.5.1"

tgc_hf_venv() {
  local dir="$1" py=/usr/bin/python3
  if [ -x "$dir/bin/python" ] && [ "$(cat "$dir/.tgc-pins" 2>/dev/null)" = "$TGC_HF_PIP" ]; then
    return 0
  fi
  echo "creating the transformers environment of tests/hf in $dir" >&2
  rm -rf "$dir"
  mkdir -p "$(dirname "$dir")"
  "$py" -m venv --system-site-packages "$dir" || return 1
  # shellcheck disable=SC2086
  "$dir/bin/python" -m pip install -q --no-deps --disable-pip-version-check $TGC_HF_PIP || return 1
  "$dir/bin/python" -c "import torch, transformers, safetensors, sentencepiece" || return 1
  "$dir/bin/python" -c "from tensorboard.backend.event_processing.event_accumulator import EventAccumulator" || return 1
  echo "$TGC_HF_PIP" > "$dir/.tgc-pins"
}

tgc_hf_venv_link() {
  local link="$1" key cache
  if [ -d "$link" ] && [ ! -L "$link" ]; then
    tgc_hf_venv "$link"
    return
  fi
  key=$(printf '%s' "$TGC_HF_PIP" | sha256sum | cut -c1-16)
  cache="${XDG_CACHE_HOME:-$HOME/.cache}/tgc/hf-venv-$key"
  tgc_hf_venv "$cache" || return 1
  mkdir -p "$(dirname "$link")"
  ln -sfn "$cache" "$link"
}
