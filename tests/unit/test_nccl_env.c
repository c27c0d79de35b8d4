/* The NCCL bootstrap address of one process per rank from the environment
 * (tgc_comm_nccl_env_addr, runtime/comm/comm_nccl.h): needs neither NCCL
 * nor a GPU, so it runs in every build. */
#include <stdlib.h>
#include <string.h>

#include "capture.h"
#include "check.h"
#include "runtime/comm/comm_nccl.h"

static void set(const char *id, const char *addr, const char *port, const char *tport)
{
    const char *names[] = {"NCCL_COMM_ID", "MASTER_ADDR", "MASTER_PORT", "TGC_NCCL_PORT"};
    const char *vals[] = {id, addr, port, tport};
    for (int i = 0; i < 4; i++) {
        if (vals[i]) setenv(names[i], vals[i], 1);
        else unsetenv(names[i]);
    }
}

static void expect_addr(const char *want)
{
    capture cap;
    cap_init(&cap);
    char buf[128] = "";
    CHECK(tgc_comm_nccl_env_addr(buf, sizeof buf, &cap.d));
    CHECK_STR(buf, want);
    CHECK(cap.d.nerrors == 0);
    cap_free(&cap);
}

static void expect_error(const char *msg)
{
    capture cap;
    cap_init(&cap);
    char buf[128];
    CHECK(!tgc_comm_nccl_env_addr(buf, sizeof buf, &cap.d));
    const char *text = cap_text(&cap);
    CHECK(cap.d.nerrors == 1);
    if (!text || !strstr(text, msg)) {
        fprintf(stderr, "expected \"%s\" in \"%s\"\n", msg, text ? text : "(null)");
        CHECK(false);
    }
    cap_free(&cap);
}

int main(void)
{
    /* torchrun's store is MASTER_PORT: NCCL's bootstrap takes the next. */
    set(NULL, "node7", "29500", NULL);
    expect_addr("node7:29501");
    set(NULL, "10.0.0.2", "29500", "40000");
    expect_addr("10.0.0.2:40000");
    /* TGC_NCCL_PORT alone suffices. */
    set(NULL, "10.0.0.2", NULL, "40000");
    expect_addr("10.0.0.2:40000");
    set(NULL, "fe80::1", "29500", NULL);
    expect_addr("[fe80::1]:29501");
    set(NULL, "[fe80::1]", "29500", NULL);
    expect_addr("[fe80::1]:29501");
    /* NCCL_COMM_ID wins over everything. */
    set("10.1.1.1:1234", "node7", "x", "y");
    expect_addr("10.1.1.1:1234");

    set(NULL, NULL, "29500", NULL);
    expect_error("neither NCCL_COMM_ID nor MASTER_ADDR is set");
    set(NULL, "", "29500", NULL);
    expect_error("neither NCCL_COMM_ID nor MASTER_ADDR is set");
    set(NULL, "node7", NULL, NULL);
    expect_error("MASTER_ADDR=node7 is set but MASTER_PORT is not");
    set(NULL, "node7", "http", NULL);
    expect_error("MASTER_PORT=http is not a TCP port (1 to 65535)");
    set(NULL, "node7", "0", NULL);
    expect_error("MASTER_PORT=0 is not a TCP port");
    set(NULL, "node7", "70000", NULL);
    expect_error("MASTER_PORT=70000 is not a TCP port");
    set(NULL, "node7", "123456789012345678901234567890", NULL);
    expect_error("MASTER_PORT=123456789012345678901234567890 is not a TCP port");
    set(NULL, "node7", "65535", NULL);
    expect_error("MASTER_PORT=65535 leaves no port after it for NCCL's bootstrap (set TGC_NCCL_PORT)");
    set(NULL, "node7", "29500", "-5");
    expect_error("TGC_NCCL_PORT=-5 is not a TCP port");
    set(NULL, "node 7", "29500", NULL);
    expect_error("MASTER_ADDR=node 7 is not a host name or address");
    set(NULL, "a[b", "29500", NULL);
    expect_error("MASTER_ADDR=a[b is not a host name or address");
    set(NULL, NULL, NULL, NULL);
    CHECK_DONE();
}
