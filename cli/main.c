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

#include "args.h"
#include "config.h"
#include "train_cmd.h"
#include "plan_cmd.h"
#include "data_cmd.h"
#include "plot_cmd.h"
#include "inspect_cmd.h"
#include "export_cmd.h"
#include "import_cmd.h"
#include "sample_cmd.h"
#include "load.h"
#include "tgc.h"
#include "passes/pass.h"
#include "codegen/step.h"
#include "passes/pipeline.h"
#include "runtime/io/trace.h"
#include "support/file.h"
#include "support/util.h"

#include "tgc_version.h" /* TGC_VERSION, TGC_COMMIT: generated at build time (cmake/version.cmake) */
#define MAX_SETS 64

enum { EXIT_OK = 0, EXIT_INPUT = 1, EXIT_USAGE = 2 };

/* The model flags of fe_model_flags, for the hand-written usages. */
#define MODEL_FLAGS_HELP                                                                          \
    "  --num-layers N, --hidden-size N, --num-attention-heads N, --num-query-groups N,\n"        \
    "  --ffn-hidden-size N, --seq-length N, --max-position-embeddings N, --hidden-dropout P,\n"  \
    "  --attention-dropout P, --init-method-std X\n"                                             \
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
     "LLaMA-family (llama; mistral without a sliding window) model: config.json and\n"
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
    for (size_t i = 0; i < ARRAY_LEN(commands); i++)
        if (strcmp(commands[i].name, name) == 0) return &commands[i];
    return NULL;
}

static void usage_all(FILE *out)
{
    fprintf(out, "tgc %s: a compiler and runtime for transformer training\n\n"
                 "usage: tgc COMMAND [ARGS]\n\ncommands:\n", TGC_VERSION);
    for (size_t i = 0; i < ARRAY_LEN(commands); i++)
        fprintf(out, "  %-9s %s\n", commands[i].name, commands[i].summary);
    fprintf(out, "\n`tgc help COMMAND` or `tgc COMMAND --help` describes a command.\n");
}

static void print_command_help(const command *c, FILE *out)
{
    fputs(c->usage, out);
    if (c->run == cmd_plan) cli_plan_usage(out);
    if (c->run == cmd_compile || c->run == cmd_run || c->run == cmd_plan) {
        fputs("\noptions (Megatron-LM names, with short aliases):\n", out);
        tgc_config_usage(out);
    }
}

static int usage_error(const char *cmd, const char *fmt, const char *arg)
{
    fprintf(stderr, "tgc %s: error: ", cmd);
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\nTry 'tgc %s --help'.\n", cmd);
    return EXIT_USAGE;
}

static int write_output(const char *path, const char *text)
{
    if (!path || strcmp(path, "-") == 0) {
        if (fputs(text, stdout) >= 0 && fflush(stdout) == 0) return EXIT_OK;
        /* Said here, while errno holds the reason; finish_output then has
         * nothing more to say. */
        fprintf(stderr, "tgc: error: cannot write the standard output: %s\n", strerror(errno));
        clearerr(stdout);
        return EXIT_INPUT;
    }
    char why[256];
    if (!file_write_atomic(path, text, strlen(text), why, sizeof why)) {
        fprintf(stderr, "tgc: error: cannot write '%s': %s\n", path, why);
        return EXIT_INPUT;
    }
    return EXIT_OK;
}

/* ---- check ---------------------------------------------------------------- */

static void human(double v, char *buf, size_t n)
{
    const char *unit[] = {"", "K", "M", "G", "T", "P"};
    int u = 0;
    while (v >= 1000.0 && u < 5) { v /= 1000.0; u++; }
    snprintf(buf, n, u ? "%.2f%s" : "%.0f%s", v, unit[u]);
}

static void print_params(const ir_graph *g, const char *param_groups)
{
    for (int i = 0; i < g->nnodes; i++) {
        const ir_node *n = g->nodes[i];
        if (!(n->flags & IR_NF_PARAM)) continue;
        char type[128];
        ir_type_str(n->dtype, &n->shape, type, sizeof type);
        const char *init = ir_attr_sym(n, "init");
        printf("%-48s %-22s %12lld  %s", n->name, type, (long long)ir_shape_numel(&n->shape), init);
        if (strcmp(init, "normal") == 0) printf("(%g)", ir_attr_float(n, "std"));
        pass_param_group grp; /* as the optimizer pass will group it */
        pass_param_group_of(n, param_groups, &grp);
        printf("  %s", grp.no_decay ? "no_decay" : "decay");
        if (grp.rule >= 0) printf(" lr_mult=%g wd_mult=%g", grp.lr_mult, grp.wd_mult);
        printf("\n");
    }
}

enum { ID_SET = 1, ID_PARAMS = TGC_CMDLINE_ID_MIN, ID_PARAM_GROUP, ID_HELP }; /* ID_SET..: cli_model_opts */

/* What compile and run refuse, check refuses too: text IR with no loss or
 * no parameters (the front end says the same of a .tg model). */
static bool check_trainable(const ir_graph *g, const char *path, diag *d)
{
    const char *why = ir_graph_untrainable(g);
    const ir_node *loss = ir_graph_loss(g);
    if (why)
        diag_error(d, loss && loss->loc.file ? loss->loc : (src_loc){diag_intern(path), 0, 0}, "model '%s' %s",
                   g->model, why);
    return !why;
}

static int cmd_check(int argc, char **argv)
{
    cli_opt lo[4 + CLI_MODEL_OPTS_MAX] = {{"params", false, false, ID_PARAMS},
                                         {"param-group", true, true, ID_PARAM_GROUP},
                                         {"help", false, true, ID_HELP}, {"h", false, true, ID_HELP}};
    int nlo = 4 + cli_model_opts(lo + 4, ID_SET);
    fe_override sets[MAX_SETS];
    int nsets = 0, ch, rc = EXIT_OK;
    bool params = false;
    const char *groups[32]; /* --param-group values (argv) */
    int ngroups = 0;
    const char *model = NULL;
    cli_args a;
    cli_args_init(&a, "check", argc, argv, lo, nlo);
    while (rc == EXIT_OK && (ch = cli_args_next(&a)) != CLI_ARGS_END) {
        if (ch == CLI_ARGS_ERROR) rc = EXIT_USAGE;
        else if (ch == CLI_ARGS_POSITIONAL) {
            if (model) rc = usage_error("check", "unexpected argument '%s'", a.value);
            model = a.value;
        } else if (ch == ID_PARAMS) params = true;
        else if (ch == ID_PARAM_GROUP) {
            char err[512];
            if (!pass_param_groups_check(a.value, err, sizeof err)) rc = usage_error("check", "--param-group: %s", err);
            else if (ngroups == (int)ARRAY_LEN(groups)) rc = usage_error("check", "too many --param-group options%s", "");
            else groups[ngroups++] = a.value;
        } else if (ch == ID_HELP) {
            for (int i = 0; i < nsets; i++) free((char *)sets[i].name);
            print_command_help(find_command("check"), stdout);
            return EXIT_OK;
        } else rc = cli_model_opt_add("check", ch, ID_SET, a.value, sets, &nsets, MAX_SETS);
    }
    if (rc == EXIT_OK && ngroups && !params)
        rc = usage_error("check", "--param-group shows in the list of --params; add --params%s", "");
    if (rc == EXIT_OK && !model) rc = usage_error("check", "missing MODEL%s", "");
    if (rc != EXIT_OK) {
        for (int i = 0; i < nsets; i++) free((char *)sets[i].name);
        return rc;
    }
    strbuf joined;
    sb_init(&joined);
    for (int i = 0; i < ngroups; i++) sb_printf(&joined, "%s%s", i ? ";" : "", groups[i]);
    diag d;
    diag_init(&d, stderr);
    ir_graph *g = cli_load_model(model, sets, nsets, &d);
    for (int i = 0; i < nsets; i++) free((char *)sets[i].name);
    if (g && (!cli_param_groups_match(g, joined.s, &d) || !check_trainable(g, model, &d))) {
        ir_graph_free(g);
        g = NULL;
    }
    diag_finish(&d);
    diag_free(&d);
    if (g && params) print_params(g, joined.s);
    sb_free(&joined);
    if (!g) return EXIT_INPUT;
    int64_t tokens = ir_graph_tokens(g);
    double fwd = (double)ir_graph_forward_flops(g);
    char p[32], f[32];
    human((double)ir_graph_param_count(g), p, sizeof p);
    human(tokens ? 3.0 * fwd / (double)tokens : 0.0, f, sizeof f);
    strbuf after; /* IR that passes went through: its op count is of that graph */
    sb_init(&after);
    for (int i = 0; i < g->npasses_run; i++) sb_printf(&after, "%s%s", i ? ", " : " (the IR after ", g->passes_run[i]);
    if (g->npasses_run) sb_putc(&after, ')');
    printf("%s: ok: %d layers, %s parameters (%lld), %sFLOP per token (forward + backward), %d ops%s\n", g->model,
           g->num_layers, p, (long long)ir_graph_param_count(g), f, g->nnodes, after.s ? after.s : "");
    sb_free(&after);
    ir_graph_free(g);
    return EXIT_OK;
}

/* ---- dump-ir -------------------------------------------------------------- */

typedef struct dump_opts {
    const char *format;  /* text, dot, json, schedule */
    const char *after;   /* NULL: after the last pass */
    bool after_all;
    strbuf out;
    pass_options popts;
    pass_given given[TGC_CONFIG_GIVEN_MAX + 1]; /* the options given, checked against IR's passes line */
    int ngiven;
    char kv_option[40]; /* "--kv-cache T" when given */
    const char *trace;   /* --trace: the simulated schedule as a Chrome trace */
    int64_t rank;        /* --rank R: rank R's compiled step instead of the IR (-1: the IR) */
    bool overlap_grads;  /* --overlap-grad-reduce, for --rank */
    double tf, tb;       /* --pp-times */
    bool traced;
    diag *d;
} dump_opts;

/* After the schedule pass: each rank's instruction list and the simulated
 * figures (as comments after text IR, so the output still reads back), and
 * the Chrome trace of the simulated step. */
static void dump_schedule(dump_opts *o, const ir_graph *g, bool print)
{
    pipe_schedule s;
    if (!pipe_schedule_from_graph(g, &o->popts, &s, o->d)) return;
    pipe_sim sim;
    char err[2048];
    if (!pipe_simulate(&s, o->tf, o->tb, &sim, err, sizeof err)) {
        diag_error_plain(o->d, "pipeline schedule: %s", err);
    } else {
        bool alone = strcmp(o->format, "schedule") == 0;
        char *lists = pipe_schedule_print(&s, true), *figures = pipe_sim_print(&s, &sim);
        for (int k = 0; print && (alone || strcmp(o->format, "text") == 0) && k < 2; k++)
            for (char *line = k ? figures : lists, *nl; *line; line = nl + 1) {
                nl = strchr(line, '\n');
                sb_printf(&o->out, "%s%.*s\n", alone ? "" : "# ", (int)(nl - line), line);
            }
        free(lists);
        free(figures);
        if (o->trace) {
            size_t n = 0;
            for (int r = 0; r < s.p; r++) n += (size_t)s.len[r];
            rt_trace *t = rt_trace_new(n);
            rt_trace_schedule(t, &s, &sim, 1000.0); /* one time unit = 1 ms */
            if (!rt_trace_write(t, o->trace, err, sizeof err)) diag_error_plain(o->d, "%s", err);
            rt_trace_free(t);
            o->traced = true;
        }
    }
    pipe_sim_free(&sim, s.p);
    pipe_schedule_free(&s);
}

static void dump_append(dump_opts *o, const char *pass, const ir_graph *g)
{
    if (strcmp(o->format, "schedule") == 0) return;
    char *s = strcmp(o->format, "dot") == 0 ? ir_graph_dot(g)
            : strcmp(o->format, "json") == 0 ? ir_graph_json(g) : ir_graph_print(g);
    if (o->after_all && strcmp(o->format, "text") == 0) sb_printf(&o->out, "# ---- after %s ----\n", pass);
    sb_puts(&o->out, s);
    free(s);
}

static void dump_after(const char *pass, const ir_graph *g, void *user)
{
    dump_opts *o = user;
    bool print = o->rank < 0 && (o->after_all || (o->after && strcmp(o->after, pass) == 0));
    if (print) dump_append(o, pass, g);
    if (strcmp(pass, "schedule") == 0 && (print || o->trace)) dump_schedule(o, g, print);
}

/* Splits "a,b,c" into pass list entries; an unknown name is a usage error. */
static int parse_pass_list(const char *spec, const pass_info **list, int *n, int max)
{
    char *copy = xstrdup(spec), *save = NULL;
    *n = 0;
    for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        const pass_info *p = pass_lookup(tok);
        if (!p || *n == max) {
            fprintf(stderr, "tgc dump-ir: error: --passes: unknown pass '%s'; the passes are: %s\n", tok,
                    pass_names());
            free(copy);
            return EXIT_USAGE;
        }
        list[(*n)++] = p;
    }
    free(copy);
    return EXIT_OK;
}

static int run_dump(const char *model, fe_override *sets, int nsets, dump_opts *o, const pass_info **list,
                    int n, const char *outpath)
{
    diag d;
    diag_init(&d, stderr);
    o->d = &d;
    ir_graph *g = cli_load_model(model, sets, nsets, &d);
    int rc = EXIT_INPUT;
    if (g) {
        sb_init(&o->out);
        dump_after(PASS_LOWER, g, o);
        pass_ctx ctx = {.d = &d, .verify_each = true, .opts = &o->popts, .given = o->given, .ngiven = o->ngiven};
        if (!(o->after && strcmp(o->after, PASS_LOWER) == 0) &&
            pass_run_list(g, list, n, &ctx, dump_after, o)) {
            if (o->rank >= 0) {
                char *prog = cg_step_dump(g, &o->popts, o->rank, o->overlap_grads, &d);
                if (prog) sb_puts(&o->out, prog);
                free(prog);
            } else if (!o->after && !o->after_all) dump_append(o, "", g);
            if (o->trace && !o->traced) diag_error_plain(&d, "--trace: the schedule pass did not run");
        }
        if (d.nerrors == 0) rc = write_output(outpath, o->out.s ? o->out.s : "");
        sb_free(&o->out);
        ir_graph_free(g);
    }
    diag_finish(&d);
    diag_free(&d);
    return rc;
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
    dump_opts *o;
    const pass_info **list;
    int n; /* -1: every pass */
    int64_t kv_positions;
} dump_cmdline;

static int dump_on_opt(void *user, int id, const char *given, const char *arg)
{
    (void)given;
    dump_cmdline *dc = user;
    dump_opts *o = dc->o;
    switch (id) {
    case D_AFTER:
        if (strcmp(arg, PASS_LOWER) != 0 && !pass_lookup(arg)) {
            fprintf(stderr, "tgc dump-ir: error: --after: unknown pass '%s'; the passes are: %s\n", arg, pass_names());
            return EXIT_USAGE;
        }
        o->after = arg;
        return EXIT_OK;
    case D_AFTER_ALL: o->after_all = true; return EXIT_OK;
    case D_PASSES: return parse_pass_list(arg, dc->list, &dc->n, 64);
    case D_FORMAT:
        if (strcmp(arg, "text") && strcmp(arg, "dot") && strcmp(arg, "json") && strcmp(arg, "schedule"))
            return usage_error("dump-ir", "--format '%s': expected text, dot, json or schedule", arg);
        o->format = arg;
        return EXIT_OK;
    case D_PP_TIMES: {
        double t[2];
        if (parse_double_list(arg, t, 2) != 2 || !(t[0] > 0 && t[0] < 1e9 && t[1] > 0 && t[1] < 1e9))
            return usage_error("dump-ir", "--pp-times '%s': expected two positive numbers TF,TB (e.g. 1,2)", arg);
        o->tf = t[0];
        o->tb = t[1];
        return EXIT_OK;
    }
    case D_KV_CACHE:
        if (!parse_i64(arg, &dc->kv_positions) || dc->kv_positions < 1)
            return usage_error("dump-ir", "--kv-cache '%s': expected a positive number of positions", arg);
        return EXIT_OK;
    case D_RANK:
        if (!parse_i64(arg, &o->rank) || o->rank < 0 || o->rank > (1 << 24))
            return usage_error("dump-ir", "--rank '%s': expected a rank number (0, 1, ...)", arg);
        return EXIT_OK;
    }
    return EXIT_USAGE;
}

/* The passes' options as the configuration gives them; what dump-ir does
 * not take keeps tgc run's defaults. 0 or a usage error. */
static int dump_pass_options(const tgc_config *c, int64_t kv_positions, pass_options *po)
{
    const int64_t deg[] = {c->tp, c->pp, c->dp, c->vp};
    static const char *const names[] = {"tensor-model-parallel-size", "pipeline-model-parallel-size",
                                        "data-parallel-size", "num-virtual-stages-per-pipeline-rank"};
    for (int i = 0; i < 4; i++)
        if (deg[i] < 1 || deg[i] > (1 << 24))
            return cli_usage_error("dump-ir", "--%s %lld: expected a positive integer", names[i], (long long)deg[i]);
    if (c->recompute_num_layers < 1)
        return cli_usage_error("dump-ir", "--recompute-num-layers 0: expected a positive integer");
    if (c->fuse && c->no_fuse) return cli_usage_error("dump-ir", "--fuse and --no-fuse exclude each other");
    char err[256];
    unsigned fusions;
    if (c->fuse && !pass_fuse_parse(c->fuse, &fusions, err, sizeof err))
        return cli_usage_error("dump-ir", "--fuse: %s", err);
    pass_options all;
    tgc_config_pass_options(c, &all);
    /* The options dump-ir does not take keep tgc run's and compile's
     * defaults (c holds them), so the IR it prints trains as the model. */
    *po = all;
    po->kv_positions = kv_positions;
    return EXIT_OK;
}

/* The combinations of --after, --after-all and --format; 0 or a usage error. */
static int dump_check_output(dump_opts *o, const pass_info **list, int n)
{
    if (o->after && o->after_all) return usage_error("dump-ir", "--after and --after-all exclude each other%s", "");
    if (o->rank >= 0 && (o->after_all || strcmp(o->format, "text") != 0 || (o->after && strcmp(o->after, "schedule") != 0)))
        return usage_error("dump-ir", "--rank prints a rank's program (the schedule pass's, compiled): it takes "
                           "--after schedule or no --after, and no %s", o->after_all ? "--after-all" : o->after &&
                           strcmp(o->after, "schedule") != 0 ? "other --after" : "--format");
    if (o->rank >= 0) o->after = NULL; /* every pass runs: the program needs memplan's offsets */
    if (o->after_all && strcmp(o->format, "json") == 0)
        return usage_error("dump-ir", "--after-all prints text or dot; use --after PASS with %s", "--format json");
    if (strcmp(o->format, "schedule") == 0) {
        if (o->after_all || (o->after && strcmp(o->after, "schedule") != 0))
            return usage_error("dump-ir", "--format schedule prints the lists of the schedule pass; drop %s",
                               o->after_all ? "--after-all" : "--after");
        o->after = "schedule";
    }
    if (o->after && strcmp(o->after, PASS_LOWER) != 0) {
        bool found = false;
        for (int i = 0; i < n; i++) found |= strcmp(list[i]->name, o->after) == 0;
        if (!found) return usage_error("dump-ir", "--after %s: that pass is not in the pipeline being run", o->after);
    }
    return EXIT_OK;
}

static int cmd_dump_ir(int argc, char **argv)
{
    fe_override sets[MAX_SETS];
    const pass_info *list[64];
    int nsets = 0, npos = 0;
    const char *pos[1] = {NULL};
    bool help = false;
    dump_opts o = {.format = "text", .tf = 1.0, .tb = 2.0, .rank = -1};
    dump_cmdline dc = {.o = &o, .list = list, .n = -1};
    tgc_cmdline cl = {dump_config_opts, dump_own_opts, (int)ARRAY_LEN(dump_own_opts), dump_on_opt, &dc, 0};
    tgc_config c;
    tgc_config_defaults(&c);
    int rc = tgc_config_parse_cmd(&c, argc, argv, &cl, pos, &npos, 1, sets, &nsets, MAX_SETS, &help);
    if (rc == EXIT_OK && help) {
        print_command_help(find_command("dump-ir"), stdout);
        for (int i = 0; i < nsets; i++) free((char *)sets[i].name);
        return EXIT_OK;
    }
    const char *model = pos[0];
    if (rc == EXIT_OK && !model) rc = usage_error("dump-ir", "missing MODEL%s", "");
    if (rc == EXIT_OK) rc = dump_pass_options(&c, dc.kv_positions, &o.popts);
    o.ngiven = tgc_config_pass_given(&c, o.given, TGC_CONFIG_GIVEN_MAX);
    if (dc.kv_positions) { /* dump-ir's own option, read by the kvcache pass */
        snprintf(o.kv_option, sizeof o.kv_option, "--kv-cache %lld", (long long)dc.kv_positions);
        o.given[o.ngiven++] = (pass_given){"kvcache", "positions", o.kv_option};
    }
    o.trace = c.trace;
    o.overlap_grads = c.overlap_grad_reduce;
    /* As for compile and run, the micro-batch is a .tg model's `batch`; for
     * text IR, whose shapes are fixed, it only counts the micro-batches. */
    size_t len = model ? strlen(model) : 0;
    if (rc == EXIT_OK && o.popts.micro_batch && len > 3 && strcmp(model + len - 3, ".tg") == 0)
        rc = cli_override_batch("dump-ir", sets, &nsets, MAX_SETS, o.popts.micro_batch);
    if (rc == EXIT_OK && dc.n < 0) {
        dc.n = pass_count();
        for (int i = 0; i < dc.n; i++) list[i] = pass_at(i);
    }
    if (rc == EXIT_OK) rc = dump_check_output(&o, list, dc.n);
    if (rc == EXIT_OK) rc = run_dump(model, sets, nsets, &o, list, dc.n, c.output);
    for (int i = 0; i < nsets; i++) free((char *)sets[i].name);
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
    cli_args_init(&a, "help", argc, argv, lo, (int)ARRAY_LEN(lo));
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
        for (size_t i = 0; i < ARRAY_LEN(commands); i++) fprintf(stderr, " %s", commands[i].name);
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
    if (file_close_stdout(why, sizeof why)) return rc;
    fprintf(stderr, "tgc: error: cannot write the standard output: %s\n", why);
    return rc == EXIT_OK ? EXIT_INPUT : rc;
}

int main(int argc, char **argv) { return finish_output(run_command(argc, argv)); }
