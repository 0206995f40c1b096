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
	char line[1024];
	int n = snprintf(line, sizeof line, "<%d>ptxcached[%d]: ", (int)lvl, (int)getpid());
	int m = vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
	size_t len = (size_t)n + (m < 0 ? 0 : (size_t)m);
	if (len > sizeof line - 2)
		len = sizeof line - 2;
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
