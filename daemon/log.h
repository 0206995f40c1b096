/* SPDX-License-Identifier: Apache-2.0 */
/*
 * log: one line per event on stderr, with a syslog priority prefix ("<6>")
 * that journald understands. Never logs request contents.
 */
#ifndef PTXCACHE_LOG_H
#define PTXCACHE_LOG_H

enum log_level { LOG_ERR = 3, LOG_WARN = 4, LOG_INFO = 6, LOG_DEBUG = 7 };

extern enum log_level log_threshold;
/* Where lines go (stderr by default; a worker keeps a copy of the real
 * stderr here, since its own fd 2 captures what LLVM prints). */
extern int log_fd;

void log_msg(enum log_level lvl, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* Start-up failures only: log and exit(1). */
void fatal(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

#define log_err(...) log_msg(LOG_ERR, __VA_ARGS__)
#define log_warn(...) log_msg(LOG_WARN, __VA_ARGS__)
#define log_info(...) log_msg(LOG_INFO, __VA_ARGS__)
#define log_debug(...) \
	do { if (log_threshold >= LOG_DEBUG) log_msg(LOG_DEBUG, __VA_ARGS__); } while (0)

#endif
