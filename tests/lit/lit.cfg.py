# lit configuration for tgc's FileCheck tests: diagnostics (diag/), the IR
# reader and verifier (ir/), and single passes on hand-written IR (passes/).
import os
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

config.substitutions.append(("%tgc", tgc))
config.substitutions.append(("FileCheck", filecheck))
config.substitutions.append(("%not", notbin))
config.environment["TGC_DEBUG"] = "0"
