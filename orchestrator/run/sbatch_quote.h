/* Values written on an #SBATCH line of a batch script so that sbatch reads them back as
 * they are. sbatch parses those lines itself, not the shell (Slurm 22.05 sbatch/opt.c,
 * checked against the test cluster's sbatch): it splits a line at unquoted whitespace,
 * groups characters within '...' or "..." (the quotes dropped, and pieces joined into one
 * word as in the shell: --output="/a b"/x is --output=/a b/x), takes a backslash, inside
 * quotes too, as making the next character literal, ends the line at an unquoted '#', and
 * fails the whole script on an unmatched quote or a word that starts with an unquoted ':'. A
 * newline always ends the directive, so no value can hold one. Besides, --output, --error and
 * --input are filename patterns: '%' starts a replacement (%j, %x, ...; %% is one '%') and a
 * backslash anywhere turns every replacement off and is dropped, so such a path cannot hold one. */
#ifndef BATON_SBATCH_QUOTE_H
#define BATON_SBATCH_QUOTE_H

#include "util/buf.h"

/* Whether s would not be read back as it is without quotes: it holds whitespace, a quote,
 * a backslash or '#', or starts with ':'. */
int sbatch_quote_needed(const char *s);
/* s appended as (a piece of) one #SBATCH word: as it is where that reads back as s, else
 * in double quotes, with '"' and '\' escaped by a backslash. within: 0, or the quote ('"'
 * or '\'') the line is already in where s goes (a template's --output="@RUN_DIR@/x"):
 * then no quotes of its own, that quote and '\' escaped. With pattern set, each '%' is
 * doubled first (a literal part of a filename pattern). s must hold no newline. */
void sbatch_quote(bt_buf *b, const char *s, int pattern, char within);
/* The quoting state of an #SBATCH line after n more characters of text as sbatch reads
 * them: *within the open quote (0 for none), *escaped whether a backslash is pending. */
void sbatch_quote_track(const char *text, size_t n, char *within, int *escaped);
/* An sbatch option word as given (--comment=a b, -Ja b, --requeue) appended: the option
 * (through its '=', or a short option's two characters) as it is where it needs no quotes,
 * the rest quoted as sbatch_quote does. */
void sbatch_quote_option(bt_buf *b, const char *word);
/* Whether the #SBATCH line that starts at line (its text after "#SBATCH") gives a
 * filename pattern option: --output, --error, --input, -o, -e or -i, as the first word. */
int sbatch_quote_is_pattern(const char *line);

#endif
