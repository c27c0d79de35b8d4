# lit configuration for tgc's FileCheck tests: diagnostics (diag/), the IR
# reader and verifier (ir/), and single passes on hand-written IR (passes/).
import os
import shutil
import subprocess
import lit.formats

config.name = "tgc"
config.test_format = lit.formats.ShTest(execute_external=True)
config.suffixes = [".tg", ".ir", ".test"]
config.test_source_root = os.path.dirname(__file__)
config.excludes = ["Inputs"]

tgc = lit_config.params.get("tgc")
if not tgc:
    lit_config.fatal("run lit with --param tgc=PATH/TO/tgc")
filecheck = lit_config.params.get("filecheck", "FileCheck-14")
notbin = lit_config.params.get("not", "not-14")

# --backend cuda: what a machine without a GPU answers depends on the build
# (cuda=1: built with the toolkit); a machine with a GPU (nvidia-smi lists
# one) runs the real thing instead, so the no-device tests do not apply.
config.substitutions.append(("%cuda-nodev", "NODEV" if lit_config.params.get("cuda") == "1" else "NOTOOLKIT"))
if shutil.which("nvidia-smi") and subprocess.run(["nvidia-smi", "-L"], capture_output=True).returncode == 0:
    config.available_features.add("cuda-device")

# An AddressSanitizer build reserves terabytes of address space for its
# shadow memory, so tests that limit it (ulimit -v) cannot run there.
if lit_config.params.get("sanitizer") == "1":
    config.available_features.add("sanitizer")

# root can give a file to another user (chown): the tests of what a
# stranger plants (cli/planted_log.test) need it.
if os.geteuid() == 0:
    config.available_features.add("root")

config.substitutions.append(("%tgc", tgc))
config.substitutions.append(("FileCheck", filecheck))
config.substitutions.append(("%not", notbin))
config.environment["TGC_DEBUG"] = "0"
