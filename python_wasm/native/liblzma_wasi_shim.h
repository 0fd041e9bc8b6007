/* WASI has no signal masks; liblzma's single-threaded build only needs them to compile. */
#include <signal.h>
typedef unsigned char sigset_t;
#define sigprocmask(how, set, oset) 0
