/* Closing a process's descriptors before it executes another program, where
 * close_range(2) is missing (Linux before 5.9, or before 5.11 for CLOSE_RANGE_CLOEXEC:
 * glibc's wrapper then fails with ENOSYS or EINVAL and closes nothing). Without the
 * fallbacks a child would inherit every descriptor that is not close-on-exec: its
 * caller's pipes and locks, a library's. */
#ifndef BATON_FD_CLOSE_H
#define BATON_FD_CLOSE_H

/* The descriptor numbers a close loop must cover, found before fork (bt_fd_close_span
 * takes it); 1024 where close_range works (no loop runs). Else one past the highest
 * descriptor open now (one scan of /proc/self/fd), with
 * room for 256 more that other threads may open before the fork (a new one takes the lowest
 * free number), and at least 1024. Not the open-files limit, which `baton run` raises
 * (often to 1048576): a loop to it would make a million close() calls per rank. Where
 * /proc cannot be read, the soft RLIMIT_NOFILE, at least 1024 (descriptors opened before
 * the limit was lowered) and at most 1 << 20 (Linux's default nr_open). */
int bt_fd_close_limit(void);

/* Closes descriptors lo..hi (hi included): close_range, else close() on each below limit.
 * Async-signal-safe: for between fork and exec. */
void bt_fd_close_span(unsigned lo, unsigned hi, int limit);

/* Makes every descriptor from lo up close-on-exec but those the process was started with
 * (fd_inherited.h: its caller's, left as they are): close_range's CLOSE_RANGE_CLOEXEC on
 * the spans between them, else each one /proc/self/fd lists. Not between fork and exec
 * (it allocates). */
void bt_fd_cloexec_from(int lo);

#endif
