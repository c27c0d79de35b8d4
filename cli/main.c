/* tgc: the command-line driver.
 *
 *   tgc check MODEL      parse, verify and summarise a model
 *   tgc dump-ir MODEL    print the IR after any pass (text, DOT or JSON)
 *   tgc compile MODEL    compile to a plan
 *   tgc run PLAN|MODEL   train
 *   tgc data ...         prepare and look into training data
 *   tgc plot LOG         draw a run's log as SVG
 *   tgc inspect PLAN     summarise a compiled plan
 *   tgc export CKPT      a checkpoint's weights as one safetensors file
 *   tgc import hf DIR    a Hugging Face checkpoint as a model and its weights
 *   tgc sample MODEL     generate text from trained weights
 *
 * Exit codes: 0 success, 1 bad input (the model, IR or data), 2 bad usage. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/config.h"
#include "cli/data_cmd.h"
#include "cli/export_cmd.h"
#include "cli/import_cmd.h"
#include "cli/inspect_cmd.h"
#include "cli/overrides.h"
#include "cli/plan_cmd.h"
#include "cli/plot_cmd.h"
#include "cli/sample_cmd.h"
#include "cli/train_cmd.h"
#include "cli/util.h"
#include "tgc.h"

#include "tgc_version.h" /* TGC_VERSION, TGC_COMMIT: generated at build time (cmake/version.cmake) */
#define MAX_SETS 64

enum { EXIT_OK = 0, EXIT_INPUT = 1, EXIT_USAGE = 2 };

/* The model flags of fe_model_flags, for the hand-written usages. */
#define MODEL_FLAGS_HELP                                                                          \
    "  --num-layers N, --hidden-size N, --num-attention-heads N, --num-query-groups N,\n"        \
    "  --ffn-hidden-size N, --seq-length N, --max-position-embeddings N, --hidden-dropout P,\n"  \
    "  --attention-dropout P, --init-method-std X, --use-rope-scaling, --rope-scaling-factor F,\n" \
    "  --add-qkv-bias, --qk-layernorm\n"                                                        \
    "                    Megatron's model flags: set the hyperparameters the model binds\n"       \
    "                    to them (hparam layers = 4 flag num-layers; docs/dsl.md)\n"

typedef struct command {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
    const char *usage;
} command;

static int cmd_check(int argc, char **argv);
static int cmd_dump_ir(int argc, char **argv);
static int cmd_compile(int argc, char **argv);
static int cmd_run(int argc, char **argv);
static int cmd_plan(int argc, char **argv);
static int cmd_data(int argc, char **argv);
static int cmd_plot(int argc, char **argv);
static int cmd_inspect(int argc, char **argv);
static int cmd_export(int argc, char **argv);
static int cmd_import(int argc, char **argv);
static int cmd_sample(int argc, char **argv);
static int cmd_help(int argc, char **argv);

static const command commands[] = {
    {"check", cmd_check, "parse and verify a model; print a one-line summary",
     "usage: tgc check MODEL [--set NAME=VALUE ...] [--num-layers N ...] [--params [--param-group SPEC ...]]\n"
     "\n"
     "Parses MODEL (.tg, or text IR .ir; '-' reads standard input), verifies it\n"
     "and prints: layers, parameters, and training FLOPs per token.\n"
     "\n"
     "  --set NAME=VALUE  override a hyperparameter (repeatable)\n"
     MODEL_FLAGS_HELP
     "  --params          list every parameter: name, shape, size, init, and its\n"
     "                    optimizer group (decay or no_decay, multipliers)\n"
     "  --param-group GLOB:lr_mult=X,wd_mult=Y\n"
     "                    the groups of `tgc run --param-group` (docs/schedules.md)\n"},
    {"dump-ir", cmd_dump_ir, "print the IR after a pass as text, DOT or JSON",
     "usage: tgc dump-ir MODEL [--after PASS | --after-all | --passes P1,P2,...]\n"
     "                   [--format text|dot|json] [-o FILE] [--set NAME=VALUE ...]\n"
     "\n"
     "Runs the pipeline on MODEL (.tg or .ir; '-' reads standard input) and prints\n"
     "the IR after the last pass, after PASS (--after), or after every pass\n"
     "(--after-all). --passes runs exactly the listed passes, as `opt` does.\n"
     "The verifier runs after every pass. A pass the IR's `passes` line lists\n"
     "is skipped, one out of the pipeline's order refused (docs/ir.md).\n"
     "\n"
     "  --after PASS       stop after PASS and print\n"
     "  --after-all        print after every pass (text and dot)\n"
     "  --passes LIST      run only these passes, in this order\n"
     "  --format FMT       text (default; round-trips), dot (Graphviz) or json\n"
     "  -o, --output FILE  write to FILE instead of standard output\n"
     "  --set NAME=VALUE   override a hyperparameter (repeatable)\n"
     MODEL_FLAGS_HELP
     "  --tp N             the tensor-parallel degree the tp pass splits for\n"
     "  --sequence-parallel  split the norm/dropout regions along the sequence (sp pass)\n"
     "  --fuse LIST        the fusions of the fuse pass: bias_gelu, bias_dropout_add, softmax,\n"
     "                     elementwise, all (default), none (docs/fusion.md)\n"
     "  --no-fuse          the fuse pass fuses nothing\n"
     "  --attention-backend auto|tgc|cudnn|unfused  auto, tgc, cudnn: the attention pass\n"
     "                     fuses each bmm/softmax/dropout/bmm chain into attention, run by\n"
     "                     tgc's kernels (tgc), cuDNN's on --backend cuda (cudnn), or cuDNN's\n"
     "                     where it loads and takes the op, else tgc's (auto); unfused: the\n"
     "                     pass does nothing (docs/attention.md)\n"
     "  --no-attention-inplace  attention reads q, k, v through [b, n, s, d] permuted copies and\n"
     "                     its output is permuted back, as written (docs/attention.md, Layouts)\n"
     "  --no-fused-lm-head  the lmhead pass does nothing: the LM head's logits stored whole\n"
     "  --lm-head-chunk N  vocabulary rows per chunk of the fused LM head (0: the rule; docs/fusion.md)\n"
     "  --recompute-granularity none|full|selective  what the recompute pass recomputes\n"
     "  --recompute-method uniform|block, --recompute-num-layers N  which layers full covers\n"
     "                     (docs/recompute.md)\n"
     "  --kv-cache T       the kvcache pass: T new positions per run against KV caches\n"
     "                     (a forward graph: --passes=dce,fuse,kvcache,memplan; docs/sampling.md)\n"
     "\n"
     "Pipeline parallelism (docs/pipeline.md): the pp pass partitions, the schedule\n"
     "pass lists each rank's instructions; --after schedule prints them (as comments\n"
     "after the IR), --format schedule prints them alone with the simulated figures.\n"
     "  --pp N, --pipeline-model-parallel-size N   pipeline ranks p\n"
     "  --vp N, --num-virtual-stages-per-pipeline-rank N   model chunks per rank v\n"
     "  --num-layers-per-virtual-pipeline-stage N  layers per chunk (v = layers / (p N))\n"
     "  --pipeline-schedule gpipe|1f1b|interleaved (default 1f1b)\n"
     "  --pp-balance layers|flops  equal layer counts (default) or equal forward FLOPs\n"
     "  --no-scatter-gather   with --tp, send whole activations between stages\n"
     "  --global-batch-size B, --micro-batch-size b, --dp d   m = B / (b d) micro-batches\n"
     "  --pp-times TF,TB   the simulator's forward and backward times (default 1,2)\n"
     "  --trace FILE.json  the simulated step as a Chrome trace (Perfetto)\n"
     "  --rank R           print rank R's compiled step instead of the IR: its slots, pinned\n"
     "                     values and sums with their step-arena offsets, its gradient buckets\n"
     "                     and one step instruction per line (runs every pass; ranks in\n"
     "                     Megatron's order, tp fastest, then dp, then pp)\n"
     "  --use-distributed-optimizer, --overlap-grad-reduce  as tgc run's, for --rank\n"},
    {"compile", cmd_compile, "compile a model into a self-contained plan",
     "usage: tgc compile MODEL -o PLAN [options]\n"
     "       tgc compile MODEL --backend cuda [--cuda-arch sm_NN] --kernel-report [options]\n"
     "\n"
     "Runs every pass (autodiff, optimizer, memplan, ...) and generates the kernels;\n"
     "PLAN holds the configuration, the planned training graph and the kernel source,\n"
     "so `tgc run PLAN` needs no .tg file. --kernel-report compiles the CUDA kernels\n"
     "with NVRTC (no GPU needed) and prints each kernel's registers and spills.\n"},
    {"run", cmd_run, "train a model or run a compiled plan",
     "usage: tgc run PLAN|MODEL (--data PATH | --inputs FILE.safetensors) [options]\n"
     "\n"
     "Trains on the CPU (--backend cpu, the default), the device simulator (--backend sim;\n"
     "docs/backends.md) or the GPU (--backend cuda; docs/cuda.md):\n"
     "--data is a Megatron dataset (PREFIX of PREFIX.idx/.bin), an\n"
     "llm.c token file or a text file (byte tokens; docs/data.md);\n"
     "--data-path 0.3 A 0.7 B blends datasets by weight, as Megatron does;\n"
     "--inputs gives every input per step. Over a PLAN each option is applied at run time,\n"
     "recompiles the plan from its lowered IR, or is refused (the list at the end).\n"},
    {"plan", cmd_plan, "memory and FLOPs before running; the parallel-configuration planner",
     "usage: tgc plan MODEL [run options]\n"
     "       tgc plan MODEL --search --gpus N --gpu-memory GIB --global-batch-size B [options]\n"
     "       tgc plan [MODEL] --calibrate\n"
     "\n"
     "Compiles MODEL for the run's options and reports per rank, before anything runs:\n"
     "parameters, gradients, optimizer state, activations (the plan's peak and where),\n"
     "workspace; a layer's activations beside the paper's formulas; the checkpoint\n"
     "count; FLOPs per iteration from the formula and from the IR. Pipeline and data\n"
     "parallelism and recomputation are evaluated analytically from one rank\n"
     "holding the whole model. --search ranks (t, p, d, b, v, SP, recomputation) by a\n"
     "step-time model; degrees given with --tp, --pp, ... stay fixed (docs/planner.md).\n"},
    {"data", cmd_data, "prepare and look into training data (Megatron indexed datasets)",
     "usage: tgc data prep TEXT... -o PREFIX [--tokenizer-type TYPE] [--vocab-file vocab.json\n"
     "                      --merge-file merges.txt | --tokenizer-model FILE.model] [--append-eod]\n"
     "                      [--split-paragraphs]\n"
     "       tgc data info PATH [--documents] [--vocab N]\n"
     "       tgc data dump PATH [--start I] [--count N] [--vocab N]\n"
     "\n"
     "prep tokenizes text files into a Megatron-LM indexed dataset PREFIX.bin +\n"
     "PREFIX.idx (one document per file, or per blank-line separated paragraph with\n"
     "--split-paragraphs), for `tgc run --data PREFIX`. --tokenizer-type (or\n"
     "--tokenizer) is Megatron's name: ByteTokenizer (bytes, the default: one token\n"
     "per byte, vocabulary 256), GPT2BPETokenizer (gpt2: GPT-2's byte-level BPE) or\n"
     "SentencePieceTokenizer (sentencepiece: a SentencePiece model's ids);\n"
     "--append-eod ends every document with <|endoftext|>, </s> or token 256.\n"
     "Tokens are uint16 when the vocabulary fits, else int32.\n"
     "info prints a dataset's format, dtype and counts (--documents: each document's\n"
     "token range); dump prints its tokens, a line per document. PATH is anything\n"
     "--data takes: a prefix, a .idx or .bin, an llm.c token file or a text file;\n"
     "--vocab N checks every token is below N (docs/data.md).\n"},
    {"plot", cmd_plot, "draw a run's --log as an SVG (loss and learning rate against step)",
     "usage: tgc plot LOG.jsonl -o PLOT.svg [--title TEXT]\n"
     "\n"
     "Reads the JSON lines `tgc run --log` writes and draws two panels: the training\n"
     "loss (and the validation loss where logged) and the learning rate against the\n"
     "step, one point per logged step (docs/tools.md).\n"},
    {"inspect", cmd_inspect, "summarise a compiled plan: configuration, programs, memory",
     "usage: tgc inspect PLAN [--cuda-arch sm_NN] [--no-kernel-cache]\n"
     "\n"
     "Reads a plan written by `tgc compile MODEL -o PLAN` and prints the model, its\n"
     "configuration, the ranks, and per rank the program (kernels, GEMMs,\n"
     "collectives) and the memory per kind. For a plan compiled with --backend cuda,\n"
     "or given --cuda-arch, its CUDA kernels are compiled with NVRTC (no GPU needed)\n"
     "and each one's registers, spills, stack and shared memory are listed (cached\n"
     "by content hash as for `tgc run`, unless --no-kernel-cache) (docs/tools.md).\n"},
    {"export", cmd_export, "write a checkpoint's weights as one safetensors file, or as a Hugging Face model",
     "usage: tgc export CKPT -o FILE.safetensors\n"
     "       tgc export --format hf CKPT|WEIGHTS --model MODEL -o DIR [--set NAME=VALUE ...]\n"
     "                  [--max-shard-size SIZE] [--dtype f32|bf16|f16]\n"
     "                  [--tokenizer-type GPT2BPETokenizer --vocab-file F\n"
     "                  --merge-file F | --tokenizer-type SentencePieceTokenizer --tokenizer-model F]\n"
     "\n"
     "CKPT is a `tgc run --save` directory (its latest checkpoint) or one of its\n"
     "iter_N directories. Every parameter is written under its name and logical\n"
     "shape (whole, however the run was partitioned), after the checkpoint's\n"
     "checksums are verified, with the metadata \"format\": \"pt\" that Hugging Face's\n"
     "loaders expect (docs/checkpoints.md).\n"
     "With --format hf the weights (CKPT, or a safetensors file of tgc's tensors:\n"
     "`tgc run --export`, `tgc import hf`) of MODEL (the .tg model they were trained\n"
     "with: samples/gpt.tg's or samples/llama.tg's structure) become a directory that\n"
     "transformers' from_pretrained loads: config.json, model.safetensors (or shards\n"
     "of at most --max-shard-size, default 5GB, and model.safetensors.index.json), in\n"
     "--dtype (default: bf16 or f16 for a checkpoint trained with --bf16 or --fp16,\n"
     "else f32; config.json's torch_dtype says which), and\n"
     "the tokenizer's files (vocab.json + merges.txt or tokenizer.model, and\n"
     "tokenizer_config.json): the flags' files, else those `tgc import hf` recorded.\n"
     MODEL_FLAGS_HELP},
    {"import", cmd_import, "read a Hugging Face GPT-2 or LLaMA checkpoint as a .tg model and its weights",
     "usage: tgc import hf DIR -o MODEL.tg --weights W.safetensors\n"
     "\n"
     "DIR is a transformers save_pretrained directory of a GPT-2 (model_type gpt2) or\n"
     "LLaMA-family (llama, Llama 3.1's rope_scaling too; mistral and qwen2 without a\n"
     "sliding window) model: config.json and\n"
     "model.safetensors or the shards model.safetensors.index.json names (F32, BF16,\n"
     "F16). Writes MODEL.tg (samples/gpt.tg's or samples/llama.tg's structure with\n"
     "the config's sizes, epsilon, rope_theta, grouped-query heads, tied or untied\n"
     "embeddings) and W.safetensors (every parameter under tgc's name and layout, f32)\n"
     "for `tgc run --init-from W` and `tgc sample MODEL.tg --weights W`. DIR's\n"
     "tokenizer (vocab.json + merges.txt, or tokenizer.model) is copied next to W as\n"
     "W's stem + .vocab.json, .merges.txt or .tokenizer.model and recorded in W's\n"
     "metadata; a tokenizer.json alone (a fast GPT-2 tokenizer: byte-level BPE)\n"
     "becomes those two files, and one that is not GPT-2's is refused by name.\n"
     "W is written tensor by tensor: the import holds one tensor, not the model.\n"
     "An option of config.json tgc's models lack is refused by name\n"
     "(docs/checkpoints.md).\n"},
    {"sample", cmd_sample, "generate text from trained weights (temperature, top-k, seeded)",
     "usage: tgc sample MODEL|PLAN --weights FILE|DIR (--prompt TEXT | --prompt-tokens IDS) --tokens N\n"
     "                  [--temperature T] [--top-k K] [--seed S] [--set NAME=VALUE ...]\n"
     "                  [--no-kv-cache | --check-kv-cache] [--backend cpu|sim|cuda]\n"
     "                  [--logits-out FILE.safetensors]\n"
     "                  [--attention-backend auto|tgc|cudnn|unfused]\n"
     "                  [--tokenizer-type TYPE --vocab-file F --merge-file F | --tokenizer-model F]\n"
     "\n"
     "Compiles MODEL forward-only (no autodiff or optimizer, dropout off, batch 1) or\n"
     "a serial PLAN's forward, loads the weights (a `tgc run --export` file, a\n"
     "`tgc run --save` directory's latest checkpoint or one of its iter_N), and\n"
     "appends N tokens to the prompt, each drawn from the logits at the last position.\n"
     "A KV cache keeps every layer's keys and values: the prompt runs as one forward\n"
     "(the prefill), then each token runs one position; a context longer than the\n"
     "model's s positions slides (a forward over its last s tokens per token).\n"
     "--prompt is encoded and the output decoded with --tokenizer-type's tokenizer\n"
     "(GPT2BPETokenizer, SentencePieceTokenizer; docs/sampling.md), else the one the\n"
     "weights' __metadata__ names (tgc.tokenizer_type), else its bytes are its\n"
     "tokens (vocab 256; text out, non-printable bytes as \\xNN); --prompt-tokens\n"
     "1,2,3 gives ids (printed as ids, as is a byte prompt's continuation of a\n"
     "vocabulary over 256).\n"
     "Prompt and continuation go to standard output, tokens/s to standard error.\n"
     "\n"
     "  --weights FILE|DIR  safetensors with the parameters' names and whole shapes\n"
     "  --tokens N          tokens to generate (0 to 1000000)\n"
     "  --temperature T     divides the logits (default 1; 0: greedy, the argmax)\n"
     "  --top-k K           draw among the K largest logits (default 0: all)\n"
     "  --seed S            the draws are Philox of (S, token number) (default 1)\n"
     "  --set NAME=VALUE    override a hyperparameter of a .tg model (repeatable)\n"
     MODEL_FLAGS_HELP
     "  --no-kv-cache       every token runs the forward over the last s tokens\n"
     "  --check-kv-cache    also run that forward for every token and compare its logits\n"
     "                      with the KV cache's (exit 1 beyond 1e-4 of the largest)\n"
     "  --logits-out FILE   write the logits at every prompt position, [n, vocab] f32\n"
     "                      named \"logits\" (one forward over the prompt, n <= s)\n"
     "  --backend CHOICE    where kernels run, as for tgc run: cpu (the default), sim\n"
     "                      (the device simulator: cpu's kernels on memory only the\n"
     "                      backend may touch), cuda\n"
     "  --attention-backend auto|tgc|cudnn|unfused  fused attention (the default; its k and\n"
     "                      v read through the KV cache) or the bmm/softmax/bmm chain\n"
     "                      (docs/attention.md)\n"
     "(docs/sampling.md)\n"},
    {"help", cmd_help, "show help for a command",
     "usage: tgc help [COMMAND]\n"
     "\n"
     "Describes COMMAND (its usage and options), or lists the commands. `tgc COMMAND\n"
     "--help` says the same.\n"},
};

static const command *find_command(const char *name)
{
    for (size_t i = 0; i < N_OF(commands); i++)
        if (strcmp(commands[i].name, name) == 0) return &commands[i];
    return NULL;
}

static void usage_all(FILE *out)
{
    fprintf(out, "tgc %s: a compiler and runtime for transformer training\n\n"
                 "usage: tgc COMMAND [ARGS]\n\ncommands:\n", TGC_VERSION);
    for (size_t i = 0; i < N_OF(commands); i++)
        fprintf(out, "  %-9s %s\n", commands[i].name, commands[i].summary);
    fprintf(out, "\n`tgc help COMMAND` or `tgc COMMAND --help` describes a command.\n");
}

static void print_command_help(const command *c, FILE *out)
{
    fputs(c->usage, out);
    if (c->run == cmd_plan) cli_plan_usage(out);
    if (c->run == cmd_compile || c->run == cmd_run || c->run == cmd_plan) {
        fputs("\noptions (Megatron-LM names, with short aliases):\n", out);
        cli_options_usage(out);
    }
}

static int usage_error(const char *cmd, const char *fmt, const char *arg)
{
    fprintf(stderr, "tgc %s: error: ", cmd);
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\nTry 'tgc %s --help'.\n", cmd);
    return EXIT_USAGE;
}

/* ---- check ---------------------------------------------------------------- */

enum { ID_SET = 1, ID_PARAMS = TGC_CMDLINE_ID_MIN, ID_PARAM_GROUP, ID_HELP }; /* ID_SET..: cli_model_opts */

/* The exit status of a library call's status. */
static int exit_status(tgc_status st) { return st == TGC_OK ? EXIT_OK : st == TGC_EUSAGE ? EXIT_USAGE : EXIT_INPUT; }

/* A command's overrides as the library's options (tgc_options_set's
 * messages on standard error): NULL after them. */
static tgc_options *options_of(const cli_override *sets, int nsets)
{
    tgc_options *o = NULL;
    if (tgc_options_new(&o) != TGC_OK) return NULL;
    if (cli_overrides_apply(o, sets, nsets) == 0) return o;
    tgc_options_free(o);
    return NULL;
}

static int cmd_check(int argc, char **argv)
{
    cli_opt lo[4 + CLI_MODEL_OPTS_MAX] = {{"params", false, false, ID_PARAMS},
                                         {"param-group", true, true, ID_PARAM_GROUP},
                                         {"help", false, true, ID_HELP}, {"h", false, true, ID_HELP}};
    int nlo = 4 + cli_model_opts(lo + 4, ID_SET);
    cli_override sets[MAX_SETS];
    int nsets = 0, ch, rc = EXIT_OK;
    tgc_check_args args = TGC_CHECK_ARGS_INIT;
    const char *groups[33]; /* --param-group values (argv), NULL-terminated */
    int ngroups = 0;
    cli_args a;
    cli_args_init(&a, "check", argc, argv, lo, nlo);
    while (rc == EXIT_OK && (ch = cli_args_next(&a)) != CLI_ARGS_END) {
        if (ch == CLI_ARGS_ERROR) rc = EXIT_USAGE;
        else if (ch == CLI_ARGS_POSITIONAL) {
            if (args.model) rc = usage_error("check", "unexpected argument '%s'", a.value);
            args.model = a.value;
        } else if (ch == ID_PARAMS) args.params = 1;
        else if (ch == ID_PARAM_GROUP) {
            if (ngroups == (int)N_OF(groups) - 1) rc = usage_error("check", "too many --param-group options%s", "");
            else groups[ngroups++] = a.value;
        } else if (ch == ID_HELP) {
            cli_overrides_free(sets, nsets);
            print_command_help(find_command("check"), stdout);
            return EXIT_OK;
        } else rc = cli_model_opt_add("check", ch, ID_SET, a.value, sets, &nsets, MAX_SETS);
    }
    if (rc == EXIT_OK && ngroups && !args.params)
        rc = usage_error("check", "--param-group shows in the list of --params; add --params%s", "");
    if (rc == EXIT_OK && !args.model) rc = usage_error("check", "missing MODEL%s", "");
    groups[ngroups] = NULL;
    args.param_groups = groups;
    tgc_options *o = rc == EXIT_OK ? options_of(sets, nsets) : NULL;
    if (rc == EXIT_OK && !o) rc = EXIT_USAGE;
    if (rc == EXIT_OK) rc = exit_status(tgc_check(o, &args, stdout));
    tgc_options_free(o);
    cli_overrides_free(sets, nsets);
    return rc;
}

/* ---- dump-ir -------------------------------------------------------------- */

/* "lower, dce, ...": the passes --after and --passes take. */
static void pipeline_names(char *buf, size_t n)
{
    size_t len = (size_t)snprintf(buf, n, "lower");
    for (int i = 0; tgc_pass_name(i) && len < n; i++) len += (size_t)snprintf(buf + len, n - len, ", %s", tgc_pass_name(i));
}

static bool is_pass_name(const char *name)
{
    for (int i = 0; tgc_pass_name(i); i++)
        if (strcmp(tgc_pass_name(i), name) == 0) return true;
    return false;
}

/* Splits "a,b,c" into pass names (NULL-terminated, at most max); an unknown name is a usage error. */
static int parse_pass_list(const char *spec, char **copy, const char **list, int max)
{
    char *save = NULL, names[1024];
    int n = 0;
    free(*copy);
    *copy = cli_xstrdup(spec);
    for (char *tok = strtok_r(*copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (!is_pass_name(tok) || n == max) {
            pipeline_names(names, sizeof names);
            fprintf(stderr, "tgc dump-ir: error: --passes: unknown pass '%s'; the passes are: %s\n", tok, names);
            return EXIT_USAGE;
        }
        list[n++] = tok;
    }
    list[n] = NULL;
    return EXIT_OK;
}

/* dump-ir takes these options of the configuration's table (the passes'),
 * and its own: */
static const char *const dump_config_opts[] = {
    "tensor-model-parallel-size", "sequence-parallel", "pipeline-model-parallel-size",
    "num-virtual-stages-per-pipeline-rank", "num-layers-per-virtual-pipeline-stage", "pipeline-schedule",
    "pp-balance", "no-scatter-gather", "global-batch-size", "micro-batch-size", "data-parallel-size", "ddp-bucket-size",
    "trace",
    "fuse", "no-fuse", "attention-backend", "no-attention-inplace", "no-fused-lm-head", "lm-head-chunk", "recompute-granularity", "recompute-method", "recompute-num-layers",
    "use-distributed-optimizer", "overlap-grad-reduce", "output", NULL};
enum { D_AFTER = TGC_CMDLINE_ID_MIN, D_AFTER_ALL, D_PASSES, D_FORMAT, D_PP_TIMES, D_KV_CACHE, D_RANK };
static const cli_opt dump_own_opts[] = {
    {"after", true, false, D_AFTER}, {"after-all", false, false, D_AFTER_ALL}, {"passes", true, false, D_PASSES},
    {"format", true, false, D_FORMAT}, {"pp-times", true, false, D_PP_TIMES}, {"kv-cache", true, false, D_KV_CACHE},
    {"rank", true, false, D_RANK}};

typedef struct dump_cmdline {
    tgc_dump_ir_args *x;
    const char *list[65];
    char *copy; /* the --passes text the list points into */
} dump_cmdline;

static int dump_on_opt(void *user, int id, const char *given, const char *arg)
{
    (void)given;
    dump_cmdline *dc = user;
    tgc_dump_ir_args *x = dc->x;
    switch (id) {
    case D_AFTER:
        if (strcmp(arg, "lower") != 0 && !is_pass_name(arg)) {
            char names[1024];
            pipeline_names(names, sizeof names);
            fprintf(stderr, "tgc dump-ir: error: --after: unknown pass '%s'; the passes are: %s\n", arg, names);
            return EXIT_USAGE;
        }
        x->after = arg;
        return EXIT_OK;
    case D_AFTER_ALL: x->after_all = 1; return EXIT_OK;
    case D_PASSES:
        x->passes = dc->list;
        return parse_pass_list(arg, &dc->copy, dc->list, 64);
    case D_FORMAT:
        if (strcmp(arg, "text") && strcmp(arg, "dot") && strcmp(arg, "json") && strcmp(arg, "schedule"))
            return usage_error("dump-ir", "--format '%s': expected text, dot, json or schedule", arg);
        x->format = arg;
        return EXIT_OK;
    case D_PP_TIMES: {
        double t[2];
        if (cli_parse_double_list(arg, t, 2) != 2 || !(t[0] > 0 && t[0] < 1e9 && t[1] > 0 && t[1] < 1e9))
            return usage_error("dump-ir", "--pp-times '%s': expected two positive numbers TF,TB (e.g. 1,2)", arg);
        x->pp_forward = t[0];
        x->pp_backward = t[1];
        return EXIT_OK;
    }
    case D_KV_CACHE:
        if (!tgc_parse_i64(arg, &x->kv_cache) || x->kv_cache < 1)
            return usage_error("dump-ir", "--kv-cache '%s': expected a positive number of positions", arg);
        return EXIT_OK;
    case D_RANK:
        if (!tgc_parse_i64(arg, &x->rank) || x->rank < 0 || x->rank > (1 << 24))
            return usage_error("dump-ir", "--rank '%s': expected a rank number (0, 1, ...)", arg);
        return EXIT_OK;
    }
    return EXIT_USAGE;
}

static int cmd_dump_ir(int argc, char **argv)
{
    cli_override sets[MAX_SETS];
    int nsets = 0, npos = 0;
    const char *pos[1] = {NULL};
    bool help = false;
    tgc_dump_ir_args x = TGC_DUMP_IR_ARGS_INIT;
    dump_cmdline dc = {.x = &x};
    tgc_cmdline cl = {dump_config_opts, dump_own_opts, (int)N_OF(dump_own_opts), dump_on_opt, &dc, 0};
    tgc_options *o = NULL;
    int rc = tgc_options_new(&o) == TGC_OK ? EXIT_OK : EXIT_INPUT;
    if (rc == EXIT_OK) rc = cli_options_parse_cmd(o, argc, argv, &cl, pos, &npos, 1, sets, &nsets, MAX_SETS, &help);
    if (rc == EXIT_OK && help) print_command_help(find_command("dump-ir"), stdout);
    x.model = pos[0];
    if (rc == EXIT_OK && !help && !x.model) rc = usage_error("dump-ir", "missing MODEL%s", "");
    if (rc == EXIT_OK && !help) rc = exit_status(tgc_dump_ir(o, &x, stdout));
    free(dc.copy);
    tgc_options_free(o);
    cli_overrides_free(sets, nsets);
    return rc;
}

/* ---- compile / run -------------------------------------------------------- */

static void help_compile(FILE *out) { print_command_help(find_command("compile"), out); }
static void help_run(FILE *out) { print_command_help(find_command("run"), out); }
static int cmd_compile(int argc, char **argv) { return cli_compile(argc, argv, help_compile); }
static int cmd_run(int argc, char **argv) { return cli_run(argc, argv, help_run); }
static void help_plan(FILE *out) { print_command_help(find_command("plan"), out); }
static int cmd_plan(int argc, char **argv) { return cli_plan(argc, argv, help_plan); }
static void help_data(FILE *out) { print_command_help(find_command("data"), out); }
static int cmd_data(int argc, char **argv) { return cli_data(argc, argv, help_data); }
static void help_plot(FILE *out) { print_command_help(find_command("plot"), out); }
static int cmd_plot(int argc, char **argv) { return cli_plot(argc, argv, help_plot); }
static void help_inspect(FILE *out) { print_command_help(find_command("inspect"), out); }
static int cmd_inspect(int argc, char **argv) { return cli_inspect(argc, argv, help_inspect); }
static void help_export(FILE *out) { print_command_help(find_command("export"), out); }
static int cmd_export(int argc, char **argv) { return cli_export(argc, argv, help_export); }
static void help_import(FILE *out) { print_command_help(find_command("import"), out); }
static int cmd_import(int argc, char **argv) { return cli_import(argc, argv, help_import); }
static void help_sample(FILE *out) { print_command_help(find_command("sample"), out); }
static int cmd_sample(int argc, char **argv) { return cli_sample(argc, argv, help_sample); }

/* ---- help and dispatch ----------------------------------------------------- */

static int cmd_help(int argc, char **argv)
{
    static const cli_opt lo[] = {{"help", false, true, 'h'}, {"h", false, true, 'h'}};
    const char *name = NULL;
    cli_args a;
    cli_args_init(&a, "help", argc, argv, lo, (int)N_OF(lo));
    for (int ch; (ch = cli_args_next(&a)) != CLI_ARGS_END;) {
        if (ch == CLI_ARGS_ERROR) return EXIT_USAGE;
        if (ch == 'h') name = "help";
        else if (name && strcmp(name, "help") != 0) return usage_error("help", "unexpected argument '%s'", a.value);
        else if (!name) name = a.value;
    }
    if (!name) { usage_all(stdout); return EXIT_OK; }
    const command *c = find_command(name);
    if (!c) {
        fprintf(stderr, "tgc help: error: unknown command '%s'; the commands are:", name);
        for (size_t i = 0; i < N_OF(commands); i++) fprintf(stderr, " %s", commands[i].name);
        fprintf(stderr, "\n");
        return EXIT_USAGE;
    }
    print_command_help(c, stdout);
    return EXIT_OK;
}

static int run_command(int argc, char **argv)
{
    if (argc < 2) { usage_all(stderr); return EXIT_USAGE; }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) { usage_all(stdout); return EXIT_OK; }
    if (!strcmp(argv[1], "--version")) {
        printf("tgc %s (%s)\nblas: %s\n", TGC_VERSION, TGC_COMMIT, tgc_blas_describe());
        return EXIT_OK;
    }
    const command *c = find_command(argv[1]);
    if (!c) {
        fprintf(stderr, "tgc: error: unknown command '%s'\n", argv[1]);
        usage_all(stderr);
        return EXIT_USAGE;
    }
    return c->run(argc - 1, argv + 1);
}

/* Output lost on standard output (a full disk, /dev/full) fails the
 * command, whichever command printed it. */
static int finish_output(int rc)
{
    char why[256];
    if (cli_close_stdout(why, sizeof why)) return rc;
    fprintf(stderr, "tgc: error: cannot write the standard output: %s\n", why);
    return rc == EXIT_OK ? EXIT_INPUT : rc;
}

int main(int argc, char **argv)
{
    tgc_set_diagnostics(stderr); /* the library's messages, as they are made */
    return finish_output(run_command(argc, argv));
}
