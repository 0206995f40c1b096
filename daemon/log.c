/* SPDX-License-Identifier: Apache-2.0 */
/* log: see log.h. Writes each line with one write(2) so lines from the
 * master and its workers never interleave mid-line. */
#include "daemon/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

enum log_level log_threshold = LOG_INFO;
int log_fd = STDERR_FILENO;

static void vlog(enum log_level lvl, const char *fmt, va_list ap)
{
	char msg[1024], line[1100];
	int n = snprintf(line, sizeof line, "<%d>ptxcached[%d]: ", (int)lvl, (int)getpid());
	int m = vsnprintf(msg, sizeof msg, fmt, ap);
	size_t mlen = m < 0 ? 0 : (size_t)m < sizeof msg ? (size_t)m : sizeof msg - 1;
	size_t len = (size_t)n;

	while (mlen && (msg[mlen - 1] == '\n' || msg[mlen - 1] == '\r'))
		mlen--;
	/* One event, one line: journald takes each line for an entry of its
	 * own, so line breaks inside a message (a tool's stderr) become "\n". */
	for (size_t i = 0; i < mlen && len < sizeof line - 3; i++) {
		if (msg[i] == '\n' || msg[i] == '\r') {
			line[len++] = '\\';
			line[len++] = msg[i] == '\n' ? 'n' : 'r';
		} else {
			line[len++] = msg[i];
		}
	}
	line[len++] = '\n';
	ssize_t w = write(log_fd, line, len);
	(void)w;
}

void log_msg(enum log_level lvl, const char *fmt, ...)
{
	if (lvl > log_threshold)
		return;
	va_list ap;
	va_start(ap, fmt);
	vlog(lvl, fmt, ap);
	va_end(ap);
}

void fatal(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vlog(LOG_ERR, fmt, ap);
	va_end(ap);
	exit(1);
}
