/*
 * The drop-in ptxas front of the ptxcache CLI (client/ptxas.c).
 */
#ifndef PTXCACHE_PTXAS_FRONT_H
#define PTXCACHE_PTXAS_FRONT_H

/*
 * Run `ptxas ARGS...` through the daemon: argv[0] is the name it was called
 * by, argv[1..argc) are ptxas's arguments. Returns the exit status the real
 * ptxas would have (or does not return: it execs the real ptxas when it
 * cannot or should not answer itself). The socket is $PTXCACHE_SOCKET, else
 * the library's default.
 */
int cmd_ptxas(int argc, char **argv);

#endif
