/* `baton submit` (submit.h): renders the batch template and calls sbatch. */
#include "submit.h"

#include <ctype.h>
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "launch_slurm.h"
#include "sbatch_quote.h"
#include "util/shquote.h"
#include "util/buf.h"
#include "util/file.h"

#ifndef BATON_SBATCH_TEMPLATE
#define BATON_SBATCH_TEMPLATE "deploy/slurm/baton.sbatch.in"
#endif

/* The template: o's, else $BATON_SBATCH_TEMPLATE, else the source tree's. */
static const char *submit_template(const submit_opts *o) {
    const char *env = getenv("BATON_SBATCH_TEMPLATE");
    if (o->template_path) return o->template_path;
    return env && env[0] ? env : BATON_SBATCH_TEMPLATE;
}

/* The run's text value of placeholder name (without the @s), or NULL for another one;
 * *what: what it is, for a message. */
static const char *submit_text(const submit_opts *o, const char *script, const char *name,
                               const char **what) {
    static const char *const names[] = {"RUN_DIR", "SCRIPT", "JOB_NAME", "WORKDIR"};
    static const char *const whats[] = {"the run directory", "the batch script's path",
                                        "the job name", "the working directory"};
    const char *vals[] = {o->run_dir, script, o->job_name, o->workdir};
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++)
        if (strcmp(name, names[k]) == 0) return *what = whats[k], vals[k];
    return NULL;
}

/* The sbatch options, each an #SBATCH line, its words quoted for sbatch where needed. */
static void submit_options(const submit_opts *o, bt_buf *b) {
    for (int i = 0; i < o->n_sbatch; i++) {
        const char *v = o->sbatch_value ? o->sbatch_value[i] : NULL;
        bt_buf_printf(b, "%s#SBATCH ", i ? "\n" : "");
        sbatch_quote_option(b, o->sbatch[i]);
        if (v == NULL) continue;
        bt_buf_printf(b, "%s", strncmp(o->sbatch[i], "--", 2) == 0 ? "=" : " "); /* -p gpu */
        sbatch_quote(b, v, 0, 0);
    }
}

/* Where a placeholder stands: on an #SBATCH line (sbatch reads it, sbatch_quote.h), and
 * there as a filename pattern (--output=...) and within the template's own quotes, or
 * elsewhere (the shell's, or a comment). */
typedef struct submit_where {
    const char *tpl;
    int line, sbatch, pattern;
    char within; /* the quote an #SBATCH line is in so far, or 0 */
    int escaped; /* a backslash pending there */
} submit_where;

/* BT_EINVAL (said) when text, what stands for a placeholder in an #SBATCH filename pattern
 * (w), holds a backslash: Slurm drops every backslash of such a path and then expands no
 * %j, so the job could not open its output and would not start. */
static int submit_check_pattern(const char *what, const char *text, const submit_where *w,
                                bt_diag *diag) {
    if (strchr(text, '\\') == NULL) return 0;
    bt_buf t;
    bt_buf_init(&t);
    bt_diag_set(diag,
                "%s '%s' holds '\\', which %s:%d cannot carry in a filename pattern (--output, "
                "--error, --input: Slurm drops every backslash and then expands no %%j, so the "
                "job could not open its output and would not start): choose a path without '\\'",
                what, bt_buf_text_of(&t, text), w->tpl, w->line);
    bt_buf_free(&t);
    return BT_EINVAL;
}

/* The value of placeholder name into b; BT_EINVAL (said) for an unknown one, or for a
 * value an #SBATCH filename pattern cannot carry. The run's text values (@RUN_DIR@,
 * @SCRIPT@, @JOB_NAME@, @WORKDIR@) are quoted for sbatch on an #SBATCH line and written as
 * they are elsewhere (a comment); @RUN_DIR_Q@, @SCRIPT_Q@, @BATON@ and @WORKER@ are quoted
 * for the shell, wherever they stand. */
static int submit_value(const submit_opts *o, const char *script, const char *name,
                        const submit_where *w, bt_buf *b, bt_diag *diag) {
    const char *what = NULL, *text = submit_text(o, script, name, &what);
    if (text != NULL && w->pattern && submit_check_pattern(what, text, w, diag) != 0)
        return BT_EINVAL;
    if (text != NULL && w->sbatch)
        sbatch_quote(b, text, w->pattern, w->within);
    else if (text != NULL)
        bt_buf_printf(b, "%s", text);
    else if (strcmp(name, "RUN_DIR_Q") == 0)
        bt_buf_shell_quote(b, o->run_dir);
    else if (strcmp(name, "SCRIPT_Q") == 0)
        bt_buf_shell_quote(b, script);
    else if (strcmp(name, "NODES") == 0)
        bt_buf_printf(b, "%u", o->nodes);
    else if (strcmp(name, "TASKS_PER_NODE") == 0)
        bt_buf_printf(b, "%u", o->tasks_per_node);
    else if (strcmp(name, "BATON") == 0)
        bt_buf_shell_quote(b, o->baton);
    else if (strcmp(name, "WORKER") == 0)
        bt_buf_shell_quote(b, o->worker);
    else if (strcmp(name, "GPU_OPTIONS") == 0) {
        if (o->gpus_per_node > 0) bt_buf_printf(b, "#SBATCH --gpus-per-node=%u", o->gpus_per_node);
    } else if (strcmp(name, "SBATCH_OPTIONS") == 0)
        submit_options(o, b);
    else {
        bt_diag_set(diag,
                    "%s:%d: unknown placeholder @%s@ (known: RUN_DIR, RUN_DIR_Q, SCRIPT, SCRIPT_Q, "
                    "JOB_NAME, NODES, TASKS_PER_NODE, WORKDIR, GPU_OPTIONS, BATON, WORKER, "
                    "SBATCH_OPTIONS)",
                    w->tpl, w->line, name);
        return BT_EINVAL;
    }
    return 0;
}

/* Where the line that starts at line_start stands (see submit_where). */
static void submit_where_of(const char *line_start, submit_where *w) {
    const char *rest = strncmp(line_start, "#SBATCH", 7) == 0  ? line_start + 7
                       : strncmp(line_start, "#SLURM", 6) == 0 ? line_start + 6
                                                               : NULL;
    w->sbatch = rest != NULL;
    w->pattern = rest != NULL && sbatch_quote_is_pattern(rest);
    w->within = 0;
    w->escaped = 0;
}

/* BT_EINVAL (said) for a placeholder at p right after a backslash that escapes it (an
 * #SBATCH line's pending one, w->escaped; elsewhere an odd run of them, as the shell
 * reads it): the backslash would make the value's opening quote literal and break the
 * quoting of the rest of the line. */
static int submit_check_escaped(const char *text, const char *p, const submit_where *w,
                                const char *name, bt_diag *diag) {
    size_t k = 0;
    while (p - k > text && p[-(ptrdiff_t)k - 1] == '\\')
        k++;
    if (w->sbatch ? !w->escaped : k % 2 == 0) return 0;
    bt_diag_set(diag,
                "%s:%d: placeholder @%s@ right after a backslash, which would escape the "
                "quoting of its value: remove the backslash",
                w->tpl, w->line, name);
    return BT_EINVAL;
}

static int submit_render(const submit_opts *o, const char *tpl, const char *text,
                         const char *script, bt_buf *out, bt_diag *diag) {
    submit_where w = {.tpl = tpl, .line = 1};
    submit_where_of(text, &w);
    for (const char *p = text; *p; p++) {
        if (*p == '\n') {
            w.line++;
            submit_where_of(p + 1, &w);
        }
        const char *end = *p == '@' ? strchr(p + 1, '@') : NULL;
        char name[64];
        size_t n = end ? (size_t)(end - p - 1) : 0;
        if (end == NULL || n == 0 || n >= sizeof name || memchr(p + 1, '\n', n)) {
            bt_buf_printf(out, "%c", *p);
            if (w.sbatch) sbatch_quote_track(p, 1, &w.within, &w.escaped);
            continue;
        }
        memcpy(name, p + 1, n);
        name[n] = '\0';
        int rc = submit_check_escaped(text, p, &w, name, diag);
        rc = rc ? rc : submit_value(o, script, name, &w, out, diag);
        if (rc != 0) return rc;
        p = end;
    }
    return 0;
}

/* Slurm's words for a failure to talk to slurmctld (slurm_strerror), and the errno texts
 * sbatch prints for a connection that broke after the request was sent (slurm_recv_timeout
 * sets the socket's error): sbatch that ends with one of them may have sent the job and
 * lost only the reply, so the job may be queued. "Unable to contact slurm controller
 * (connect failure)" is not among them: sbatch got no connection, so nothing reached
 * slurmctld. */
static const char *const submit_lost_reply[] = {
    "Socket timed out on send/recv operation",
    "Zero Bytes were transmitted or received",
    "(send failure)",
    "(receive failure)",
    "(shutdown failure)",
    "Message send failure",
    "Message receive failure",
    "Communication connection failure",
    "Communication shutdown failure",
    "Unexpected message received",
    "Connection reset by peer",
    "Broken pipe",
    "Connection timed out",
    "Insane message length",
    "Protocol authentication error",
};

/* sbatch's status for an error: 1, or SLURM_EXIT_ERROR where the site sets it. */
static int submit_error_status(int rc) {
    const char *e = getenv("SLURM_EXIT_ERROR");
    int site = e ? atoi(e) : 0;
    return rc == 1 || (site != 0 && rc == site);
}

/* Whether sbatch's failure (status rc, output out) is a refusal, with no job queued: sbatch
 * could not be run (-1; 127 with nothing said: exec failed), or it exited with its error
 * status (1, or SLURM_EXIT_ERROR), saying "sbatch: error:" or "sbatch: fatal:" and no
 * failure to talk to slurmctld. Anything else (killed at the timeout, 124, or by a signal,
 * another status, a lost reply) may have queued the job. */
static int submit_refused(int rc, const char *out) {
    if (rc == -1 || (rc == 127 && out[0] == '\0')) return 1;
    if (!submit_error_status(rc)) return 0;
    if (strstr(out, "sbatch: error:") == NULL && strstr(out, "sbatch: fatal:") == NULL) return 0;
    for (size_t i = 0; i < sizeof submit_lost_reply / sizeof submit_lost_reply[0]; i++)
        if (strstr(out, submit_lost_reply[i]) != NULL) return 0;
    return 1;
}

/* Whether line (len bytes) is what sbatch --parsable prints for the job: "ID", "ID_TASK"
 * or either followed by ";CLUSTER"; the id's length in *n. */
static int submit_id_line(const char *line, size_t len, size_t *n) {
    size_t i = 0;
    while (i < len && isdigit((unsigned char)line[i]))
        i++;
    if (i == 0) return 0;
    if (i < len && line[i] == '_') {
        size_t t = ++i;
        while (i < len && isdigit((unsigned char)line[i]))
            i++;
        if (i == t) return 0;
    }
    *n = i;
    return i == len || line[i] == ';';
}

/* The job id in sbatch's output (stdout and stderr together: a site's job_submit plugin
 * or cli_filter may print messages before it): its last line that is one, or "". */
static void submit_job_id(const char *out, char *job_id, size_t cap) {
    job_id[0] = '\0';
    for (const char *p = out; *p;) {
        size_t len = strcspn(p, "\n"), n = 0;
        if (submit_id_line(p, len, &n)) snprintf(job_id, cap, "%.*s", (int)n, p);
        p += len + (p[len] == '\n');
    }
}

/* How long sbatch may take: 60 s; test hook BATON_FAULT_SBATCH_TIMEOUT=S (docs/slurm.md),
 * so that a test can stop an sbatch that hangs without waiting a minute. */
static double submit_sbatch_timeout(void) {
    const char *t = getenv("BATON_FAULT_SBATCH_TIMEOUT");
    double s = t ? atof(t) : 0;
    return s > 0 ? s : 60;
}

/* After what reads as a refusal: whether squeue (10 s) lists a job of yours whose script
 * is script all the same (a lost reply worded as none of submit_lost_reply): 1 with its
 * id in job_id, 0 when it lists none, -1 when squeue cannot tell (it failed, or listed
 * more than fits). */
static int submit_listed(const char *script, char *job_id, size_t cap) {
    char user[64];
    snprintf(user, sizeof user, "--user=%u", (unsigned)getuid());
    char *argv[] = {"squeue", "--noheader", user, "--format=%i,%o", NULL};
    size_t n = 1 << 20;
    char *out = malloc(n);
    if (out == NULL) return -1;
    int rc = launch_slurm_exec(argv, out, n, 10) == 0 && strlen(out) < n - 1 ? 0 : -1;
    for (char *save = NULL, *l = rc ? NULL : strtok_r(out, "\n", &save); l && rc == 0;
         l = strtok_r(NULL, "\n", &save)) {
        char *comma = strchr(l, ',');
        if (comma && strcmp(comma + 1, script) == 0)
            rc = 1, snprintf(job_id, cap, "%.*s", (int)(comma - l), l);
    }
    free(out);
    return rc;
}

/* A refusal (rc, out) confirmed by squeue before the directory goes: *unsure 2 when
 * squeue cannot tell, 0 when it lists no job of script; a job listed: said, its id in
 * job_id, and 0 returned (submitted; sbatch's reply was lost). No connection at all
 * ("connect failure") needs no check: nothing reached slurmctld. */
static int submit_confirm(const char *script, const char *out, char *job_id, size_t cap,
                          int *unsure, bt_diag *diag) {
    if (strstr(out, "(connect failure)") != NULL) return BT_EIO;
    int listed = submit_listed(script, job_id, cap);
    if (listed < 0) *unsure = 2;
    if (listed <= 0) return BT_EIO;
    fprintf(stderr,
            "baton submit: %s\nbaton submit: but squeue lists job %s for %s: it was "
            "submitted (sbatch's reply was lost)\n",
            diag->msg, job_id, script);
    bt_diag_init(diag);
    return 0;
}

static int submit_sbatch(const char *script, char *job_id, size_t cap, int *unsure, bt_diag *diag) {
    char out[4096];
    char *argv[] = {"sbatch", "--parsable", (char *)script, NULL};
    double timeout_s = submit_sbatch_timeout();
    int rc = launch_slurm_exec_tail(argv, out, sizeof out, timeout_s); /* the last error */
    for (size_t n = strlen(out); n > 0 && (out[n - 1] == '\n' || out[n - 1] == ' ');)
        out[--n] = '\0'; /* the message ends the line */
    if (rc == 124)
        bt_diag_set(diag, "sbatch %s gave no answer within %g s and was killed%s%.1000s", script,
                    timeout_s, out[0] ? ": " : "", out);
    else if (rc == -1 || (rc == 127 && out[0] == '\0'))
        bt_diag_set(diag, "cannot run sbatch for %s: %s", script,
                    rc == -1 ? "no process could be started"
                             : "not found on PATH, or not a program");
    else if (rc != 0)
        bt_diag_set(diag, "sbatch %s failed (status %d): %s%s", script, rc,
                    strlen(out) > 1000 ? "..." : "",
                    out + (strlen(out) > 1000 ? strlen(out) - 1000 : 0));
    if (rc != 0) {
        *unsure = !submit_refused(rc, out);
        return *unsure || rc == -1 || (rc == 127 && out[0] == '\0')
                   ? BT_EIO
                   : submit_confirm(script, out, job_id, cap, unsure, diag);
    }
    submit_job_id(out, job_id, cap);
    if (job_id[0] == '\0')
        fprintf(stderr,
                "baton submit: warning: sbatch %s succeeded but named no job id (its output: "
                "%.500s); 'squeue -u \"$USER\"' lists your jobs\n",
                script, out);
    return 0;
}

/* A value for an #SBATCH line: anything sbatch can read back (sbatch_quote.h) but a
 * newline, which ends the directive and would make the rest a line of the script. */
static int submit_check_line(const char *what, const char *s, const char *fix, bt_diag *diag) {
    if (strchr(s, '\n') == NULL) return 0;
    bt_buf t;
    bt_buf_init(&t);
    bt_diag_set(diag, "%s '%s' holds a line break, which an #SBATCH line cannot carry: %s", what,
                bt_buf_text_of(&t, s), fix);
    bt_buf_free(&t);
    return BT_EINVAL;
}

/* The options the script writes itself, which a later line would silently override, and
 * what to do instead. */
static const struct {
    const char *lng, *shrt, *instead;
} submit_reserved[] = {
    {"--nodes", "-N",
     "the run would not match its allocation: give the recipe's node count as baton submit "
     "--nodes K, before any --"},
    {"--ntasks-per-node", NULL,
     "the run would not match its allocation: it is the recipe's cluster.gpus_per_node, "
     "--gpus-per-node G"},
    {"--ntasks", "-n",
     "the run would not match its allocation: the tasks are nodes x cluster.gpus_per_node, "
     "--nodes K --gpus-per-node G"},
    {"--gpus-per-node", NULL,
     "the run would not match its allocation: give the recipe's as baton submit "
     "--gpus-per-node G, before any --"},
    {"--gpus", "-G",
     "a CUDA recipe asks for --gpus-per-node from cluster.gpus_per_node: --gpus-per-node G"},
    {"--output", "-o", "the job's log is RUN_DIR/slurm-%j.out; edit the script or --template"},
    {"--open-mode", NULL, "the log is appended to across requeues; edit the script or --template"},
    {"--chdir", "-D", "it is where baton submit runs: the recipe's relative paths resolve there"},
};
#define SUBMIT_N_RESERVED (sizeof submit_reserved / sizeof submit_reserved[0])

/* The reserved option opt names (as given: --nodes=2, -N2, -N, or an abbreviation sbatch
 * takes as the option, --nod=2 or --out=x: three letters at least), or -1. An option
 * named whole comes before one it abbreviates (--ntasks, --gpus). */
static int submit_reserved_index(const char *opt) {
    size_t len = strncmp(opt, "--", 2) == 0 ? strcspn(opt, "=") : 0;
    for (size_t k = 0; k < SUBMIT_N_RESERVED; k++)
        if (len > 0 && strlen(submit_reserved[k].lng) == len &&
            strncmp(opt, submit_reserved[k].lng, len) == 0)
            return (int)k;
    for (size_t k = 0; k < SUBMIT_N_RESERVED; k++) {
        const char *sh = submit_reserved[k].shrt;
        if ((len >= 5 && strncmp(opt, submit_reserved[k].lng, len) == 0) ||
            (sh != NULL && strncmp(opt, sh, 2) == 0))
            return (int)k;
    }
    return -1;
}

static int submit_reserved_check(const char *opt, unsigned gpus_per_node, bt_diag *diag) {
    int k = submit_reserved_index(opt);
    if (k < 0) return 0;
    if (gpus_per_node == 0 && strcmp(submit_reserved[k].lng, "--gpus") == 0) {
        bt_diag_set(diag,
                    "sbatch option '%s': the recipe runs on CPUs (cluster.device is not cuda), "
                    "so its job asks for no GPU; for GPUs set cluster.device: cuda and "
                    "cluster.gpus_per_node (or --gpus-per-node G), which the batch script "
                    "asks for itself",
                    opt);
        return BT_EINVAL;
    }
    bt_diag_set(diag,
                "sbatch option '%s': the batch script sets %s itself (Slurm would take the "
                "later line): %s",
                opt, submit_reserved[k].lng, submit_reserved[k].instead);
    return BT_EINVAL;
}

/* sbatch options that need a value (sbatch(1); the usual ones, long and short): given
 * bare (no '=', nothing attached, no value after it), sbatch would refuse the script. */
static const char *const submit_valued[] = {
    "--time",
    "-t",
    "--partition",
    "-p",
    "--account",
    "-A",
    "--qos",
    "-q",
    "--job-name",
    "-J",
    "--constraint",
    "-C",
    "--dependency",
    "-d",
    "--exclude",
    "-x",
    "--nodelist",
    "-w",
    "--cpus-per-task",
    "-c",
    "--array",
    "-a",
    "--licenses",
    "-L",
    "--mem",
    "--mem-per-cpu",
    "--mem-per-gpu",
    "--mail-type",
    "--mail-user",
    "--reservation",
    "--begin",
    "--signal",
    "--comment",
    "--gres",
    "--time-min",
    "--deadline",
    "--wckey",
    "--export",
    "--cluster",
    "-M",
    "--error",
    "-e",
    "--input",
    "-i",
    "--priority",
    "--switches",
    "--cores-per-socket",
    "--gpus-per-task",
    "--cpus-per-gpu",
};

static int submit_bare_check(const char *opt, const char *value, bt_diag *diag) {
    if (value != NULL) return 0;
    for (size_t k = 0; k < sizeof submit_valued / sizeof submit_valued[0]; k++)
        if (strcmp(opt, submit_valued[k]) == 0) {
            if (opt[1] == '-')
                bt_diag_set(diag, "sbatch option '%s' needs a value (%s=VALUE or %s VALUE)", opt,
                            opt, opt);
            else /* -p=debug would be the value "=debug" */
                bt_diag_set(diag, "sbatch option '%s' needs a value (%s VALUE or %sVALUE)", opt,
                            opt, opt);
            return BT_EINVAL;
        }
    return 0;
}

/* sbatch options that print something and exit, submitting nothing: on an #SBATCH line
 * they would stop the job's submission with sbatch's help or version. */
static int submit_info_check(const char *opt, bt_diag *diag) {
    static const char *const info[] = {"-h", "--help", "--usage", "-V", "--version"};
    size_t len = strcspn(opt, "=");
    for (size_t k = 0; k < sizeof info / sizeof info[0]; k++)
        if (strlen(info[k]) == len && strncmp(opt, info[k], len) == 0) {
            bt_diag_set(diag,
                        "sbatch option '%s' prints sbatch's %s and submits nothing: not an "
                        "option for the job (run 'sbatch %s' for it)",
                        opt, k < 3 ? "help" : "version", info[k]);
            return BT_EINVAL;
        }
    return 0;
}

/* An empty value given apart to a short option (-p ''): written "-p" alone, or "-p \"\"",
 * sbatch drops the empty word and takes the next one as the value (the next option, say
 * --time=5, silently lost). A long one is written joined, --partition=, which sbatch
 * reads as given. */
static int submit_empty_check(const char *opt, const char *value, bt_diag *diag) {
    if (value == NULL || value[0] != '\0' || strncmp(opt, "--", 2) == 0) return 0;
    bt_diag_set(diag,
                "sbatch option '%s' given an empty value, which an #SBATCH line cannot carry "
                "(sbatch drops an empty word and would take the next one as the value): give "
                "a value, or leave the option out",
                opt);
    return BT_EINVAL;
}

static int submit_check(const submit_opts *o, bt_diag *diag) {
    const char *path = "choose a path without one", *line = "give it on one line";
    int rc = submit_check_line("the run directory", o->run_dir, path, diag);
    rc = rc ? rc : submit_check_line("the working directory", o->workdir, path, diag);
    rc =
        rc ? rc : submit_check_line("the job name", o->job_name, "choose a name without one", diag);
    for (int i = 0; rc == 0 && i < o->n_sbatch; i++) {
        rc = submit_check_line("the sbatch option", o->sbatch[i], line, diag);
        rc = rc ? rc : submit_info_check(o->sbatch[i], diag);
        rc = rc ? rc : submit_reserved_check(o->sbatch[i], o->gpus_per_node, diag);
        rc =
            rc ? rc
               : submit_bare_check(o->sbatch[i], o->sbatch_value ? o->sbatch_value[i] : NULL, diag);
        if (rc == 0 && o->sbatch_value && o->sbatch_value[i])
            rc = submit_check_line("the sbatch option's value", o->sbatch_value[i], line, diag);
        if (rc == 0 && o->sbatch_value)
            rc = submit_empty_check(o->sbatch[i], o->sbatch_value[i], diag);
    }
    return rc;
}

/* The template's text (free *text); a template that cannot be read is bad input. */
static int submit_read_template(const submit_opts *o, char **text, bt_diag *diag) {
    const char *tpl = submit_template(o);
    size_t len = 0;
    *text = NULL;
    if (bt_read_file(tpl, 1 << 20, text, &len) != 0) {
        bt_diag_set(diag,
                    "batch template %s: %s (give another with --template FILE or "
                    "BATON_SBATCH_TEMPLATE=FILE)",
                    tpl, strerror(errno));
        return BT_EINVAL;
    }
    return 0;
}

/* The options checked and the script rendered, into b. */
static int submit_script(const submit_opts *o, const char *script, bt_buf *b, bt_diag *diag) {
    char *text = NULL;
    int rc = submit_check(o, diag);
    rc = rc ? rc : submit_read_template(o, &text, diag);
    rc = rc ? rc : submit_render(o, submit_template(o), text, script, b, diag);
    free(text);
    return rc;
}

int submit_precheck(const submit_opts *o, bt_diag *diag) {
    char script[4200];
    snprintf(script, sizeof script, "%s/baton.sbatch", o->run_dir);
    bt_buf b;
    bt_buf_init(&b);
    int rc = submit_script(o, script, &b, diag);
    bt_buf_free(&b);
    return rc;
}

/* The job id kept in RUN_DIR/job_id, for `baton status` while the job waits in the
 * queue; the job is submitted either way, so a failure is only warned about. */
static void submit_note_job(const char *run_dir, const char *job_id) {
    char path[4200];
    snprintf(path, sizeof path, "%s/job_id", run_dir);
    FILE *f = bt_fopen_private(path, "w"); /* 0600, a planted link refused */
    int bad = f == NULL || fprintf(f, "%s\n", job_id) < 0;
    const char *why = f == NULL ? bt_file_why(errno) : NULL;
    if (f != NULL && fclose(f) != 0) bad = 1;
    if (bad)
        fprintf(stderr,
                "baton submit: warning: cannot write %s: %s (baton status will not name the job)\n",
                path, why ? why : strerror(errno));
}

int submit_batch(const submit_opts *o, char *script, size_t script_cap, char *job_id, size_t cap,
                 int *unsure, bt_diag *diag) {
    job_id[0] = '\0';
    *unsure = 0;
    snprintf(script, script_cap, "%s/baton.sbatch", o->run_dir);
    bt_buf b;
    bt_buf_init(&b);
    int rc = submit_script(o, script, &b, diag);
    FILE *f = rc == 0 ? bt_fopen_private(script, "w") : NULL; /* a planted link refused */
    int bad = f == NULL || fchmod(fileno(f), 0700) != 0 || fputs(bt_buf_str(&b), f) < 0;
    const char *why = f == NULL ? bt_file_why(errno) : NULL;
    if (f != NULL && fclose(f) != 0) bad = 1;
    if (rc == 0 && bad) {
        bt_diag_set(diag, "cannot write the batch script %s: %s", script,
                    why ? why : strerror(errno));
        rc = BT_EIO;
    }
    bt_buf_free(&b);
    if (rc != 0 || o->dry_run) return rc;
    rc = submit_sbatch(script, job_id, cap, unsure, diag);
    if (rc == 0 && job_id[0]) submit_note_job(o->run_dir, job_id);
    return rc;
}
