/* Hugging Face checkpoints both ways (docs/checkpoints.md, "Hugging Face"):
 * GPT-2 (GPT2LMHeadModel) and LLaMA-family (LlamaForCausalLM, and Mistral
 * without a sliding window) models.
 *
 * hf_config_read reads DIR/config.json into an hf_model, refusing an
 * architecture or option tgc's models do not have by name; hf_import maps
 * the checkpoint's tensors (model.safetensors, or the shards a
 * model.safetensors.index.json names; F32, BF16, F16 or F64, read as f32) to
 * tgc's names and layouts and writes one safetensors file; hf_model_write_tg
 * writes the .tg model whose parameters those are (samples/gpt.tg's and
 * samples/llama.tg's structure and names, with the config's values).
 * hf_model_from_graph goes the other way: the config of a compiled tgc
 * model (checked parameter by parameter), and hf_export writes config.json,
 * model.safetensors (or shards and their index) and the tokenizer files.
 *
 * The layouts: GPT-2's Conv1D weights are [in, out] where tgc's linears are
 * [out, in]; its c_attn packs q, k, v each over all heads ([q | k | v]),
 * where tgc's query_key_value packs them per head ([q_h k_h v_h] for each
 * head h). LLaMA's q_proj, k_proj, v_proj become one query_key_value
 * weight packed per key/value group (its `group` query heads, its key
 * head, its value head: samples/llama.tg); both use rotate-half RoPE. Every
 * mapping is a permutation, so an import of an export gives the same bytes. */
#ifndef TGC_RUNTIME_HF_H
#define TGC_RUNTIME_HF_H
#include <stdbool.h>
#include <stdint.h>

#include "ir/ir.h"
#include "runtime/io/safetensors.h"
#include "support/diag.h"
#include "support/util.h"

typedef enum hf_family { HF_GPT2, HF_LLAMA } hf_family;

typedef struct hf_model {
    hf_family family;
    char model_type[16];         /* "gpt2", "llama", "mistral", "qwen2" */
    int64_t layers, hidden, heads, kv_heads, ffn, vocab, max_pos;
    double eps;                  /* layer_norm_epsilon / rms_norm_eps */
    double rope_theta;           /* LLaMA */
    /* Llama 3.1's RoPE scaling (rope_scaling of rope_type llama3; factor 1:
     * none, the others Megatron's defaults 1, 4, 8192). */
    double rope_factor, rope_low, rope_high;
    int64_t rope_orig;
    bool tied;                   /* the LM head is the word embedding */
    bool qkv_bias;               /* Qwen2: biases on the q, k, v projections only (Megatron's --add-qkv-bias) */
    bool gelu_erf;               /* GPT-2: activation "gelu" (erf) rather than the tanh form */
    double embd_pdrop, resid_pdrop, attn_pdrop; /* GPT-2's dropouts (0 for LLaMA) */
    int64_t bos, eos;            /* token ids from the config, -1 when absent */
} hf_model;

/* Megatron's tokenizer flags (--tokenizer-type GPT2BPETokenizer with
 * --vocab-file and --merge-file, or SentencePieceTokenizer with
 * --tokenizer-model); NULLs when there is none. */
typedef struct hf_tokenizer {
    const char *type, *vocab_file, *merge_file, *model_file;
} hf_tokenizer;

/* The tokenizer file i (0 vocab.json, 1 merges.txt, 2 tokenizer.model)
 * hf_import writes beside the weights: W.safetensors's STEM.vocab.json,
 * STEM.merges.txt, STEM.tokenizer.model (malloc'd). Commands check these
 * against their other files as outputs of their own. */
#define HF_TOKENIZER_FILES 3
char *hf_import_tokenizer_path(const char *weights, int i);

/* DIR/config.json; false after reporting (FILE:LINE:COL of the key). */
bool hf_config_read(const char *dir, hf_model *m, diag *d);

/* DIR's weights in tgc's names and layouts, written to out (F32) with the
 * metadata "format" "pt", "producer" "tgc", "model" and, when DIR has a
 * tokenizer (vocab.json + merges.txt, or tokenizer.model), the keys
 * tgc.tokenizer_type, tgc.vocab_file, tgc.merge_file, tgc.tokenizer_model
 * (paths relative to out's directory) after copying those files next to
 * out as STEM.vocab.json, STEM.merges.txt, STEM.tokenizer.model.
 * *tok_type receives the tokenizer type found (NULL: none). */
bool hf_import(const char *dir, const hf_model *m, const char *model_name, const char *out, const char **tok_type,
               diag *d);

/* The .tg text of m (a model named as `name`, for messages). */
void hf_model_write_tg(const hf_model *m, const char *source_dir, strbuf *out);

/* The Hugging Face config of a tgc model: its hyperparameters `heads` and
 * `kv_heads` and the shapes and attributes of its graph; every parameter
 * must be one the mapping knows, with the shape it expects. */
bool hf_model_from_graph(const ir_graph *g, hf_model *m, diag *d);

/* "5GB", "500MB", "10KB", "2GiB", a number of bytes: transformers'
 * max_shard_size; false on anything else. */
bool hf_parse_size(const char *s, int64_t *out);

/* w's tensors (tgc's names, as hf_import or `tgc run --export` write them)
 * as a Hugging Face directory: config.json, model.safetensors or, when the
 * tensors exceed max_shard bytes, model-0000K-of-0000N.safetensors and
 * model.safetensors.index.json, and the tokenizer's files under
 * transformers' names with a tokenizer_config.json. The tensors are written
 * in dtype (F32, or BF16 / F16 rounded to nearest even), config.json's
 * torch_dtype saying which, one tensor at a time (the export holds one
 * tensor, not the model). */
bool hf_export(const tgc_st_file *w, const hf_model *m, const char *dir, int64_t max_shard, tgc_st_dtype dtype,
               const hf_tokenizer *tok, diag *d);

#endif
