/* A run directory named on a command line (baton status, baton stop), checked before
 * anything in it is read: one wording for what it is when it is no run directory. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "journal.h"
#include "run_dir.h"

int run_dir_check_arg(const char *cmd, const char *dir, bt_diag *diag) {
    struct stat st;
    char journal[4200];
    if (dir[0] == '\0') {
        bt_diag_set(diag, "'': an empty name; give a run directory");
        return BT_EINVAL;
    }
    if (stat(dir, &st) != 0) {
        if (errno == ENOENT || errno == ENOTDIR) /* "afile/x": no such directory either */
            bt_diag_set(diag, "%s: no such directory", dir);
        else
            bt_diag_set(diag, "%s: cannot read: %s", dir, strerror(errno));
        return BT_EINVAL;
    }
    if (!S_ISDIR(st.st_mode)) {
        bt_diag_set(diag, "%s: not a directory (baton %s takes a run directory)", dir, cmd);
        return BT_EINVAL;
    }
    snprintf(journal, sizeof journal, "%s/%s", dir, JOURNAL_FILE);
    if (stat(journal, &st) != 0 || S_ISREG(st.st_mode)) return 0; /* judged by the caller */
    bt_diag_set(diag, "%s: not a run directory (its journal is not a file)", dir);
    return BT_EINVAL;
}
