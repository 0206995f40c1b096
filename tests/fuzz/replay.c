/* SPDX-License-Identifier: Apache-2.0 */
/*
 * replay: a main() for a libFuzzer harness built without libFuzzer, so that
 * `make test` runs every seed of the corpus through it with the normal
 * compiler (and, under `make check-asan`, with the sanitizers).
 *
 * usage: replay_HARNESS DIR|FILE...
 * Each file is read whole and passed once to LLVMFuzzerTestOneInput(). A
 * harness reports a violated property by aborting, so reaching the end is
 * the pass; the last line says how many inputs ran.
 */
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_file(const char *path)
{
	FILE *f = fopen(path, "rb");
	struct stat st;

	if (!f || fstat(fileno(f), &st) < 0) {
		fprintf(stderr, "replay: cannot read '%s': %s\n", path, strerror(errno));
		if (f)
			fclose(f);
		return -1;
	}
	size_t n = (size_t)st.st_size;
	/* At least one byte, so the harness gets a valid pointer for n = 0;
	 * exactly n, so that ASan sees any read past the input. */
	uint8_t *p = malloc(n ? n : 1);
	if (!p || fread(p, 1, n, f) != n) {
		fprintf(stderr, "replay: cannot read '%s'\n", path);
		free(p);
		fclose(f);
		return -1;
	}
	fclose(f);
	LLVMFuzzerTestOneInput(p, n);
	free(p);
	return 0;
}

static int cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

int main(int argc, char **argv)
{
	long ran = 0;

	if (argc < 2) {
		fprintf(stderr, "usage: %s DIR|FILE...\n", argv[0]);
		return 2;
	}
	for (int i = 1; i < argc; i++) {
		struct stat st;
		if (stat(argv[i], &st) < 0) {
			fprintf(stderr, "replay: cannot read '%s': %s\n", argv[i],
				strerror(errno));
			return 1;
		}
		if (!S_ISDIR(st.st_mode)) {
			if (run_file(argv[i]) < 0)
				return 1;
			ran++;
			continue;
		}
		/* Sorted, so a failure is reproducible in one order. */
		DIR *d = opendir(argv[i]);
		struct dirent *e;
		char **names = NULL;
		size_t n = 0;
		while (d && (e = readdir(d))) {
			if (e->d_name[0] == '.')
				continue;
			char **nn = realloc(names, (n + 1) * sizeof *names);
			if (!nn)
				return 1;
			names = nn;
			if (asprintf(&names[n], "%s/%s", argv[i], e->d_name) < 0)
				return 1;
			n++;
		}
		if (d)
			closedir(d);
		qsort(names, n, sizeof *names, cmp);
		for (size_t k = 0; k < n; k++) {
			if (run_file(names[k]) < 0)
				return 1;
			ran++;
			free(names[k]);
		}
		free(names);
	}
	printf("replay: %ld inputs, no failure\n", ran);
	return 0;
}
