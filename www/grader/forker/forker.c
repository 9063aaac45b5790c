// A fork server's one native call (issue 39, item 3): a sandbox restored once (the
// zygote, sandbox.mjs --zygote) forks a fresh process per submission instead of a
// new Node starting and restoring Pyodide (about 250 ms of CPU against a few ms).
//
// Node offers no fork: a forked Node keeps only the forking thread, so the zygote
// runs with --single-threaded and --liftoff-only (V8 posts no work to helper
// threads that would not exist in the child), and V8 marks its heap MADV_DONTFORK
// (the child would fault on its first object), which is undone here first.
//
// The child drops what the zygote holds before any learner code runs in it: its
// own uid and gid (when the zygote may set them), no supplementary groups, no new
// privileges, not dumpable (no other process of its uid reads its memory or traces
// it), killed with the zygote, and it may fork no further.
#define _GNU_SOURCE
#include <node_api.h>
#include <errno.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <unistd.h>

static int is_child = 0;

static void keep_all_mappings(void) {
  FILE *maps = fopen("/proc/self/maps", "r");
  if (!maps) return;
  char line[1024];
  while (fgets(line, sizeof line, maps)) {
    unsigned long from, to;
    if (sscanf(line, "%lx-%lx", &from, &to) == 2) madvise((void *)from, to - from, MADV_DOFORK);
  }
  fclose(maps);
}

static napi_value throw_error(napi_env env, const char *what) {
  napi_throw_error(env, NULL, what);
  return NULL;
}

// fork(uid): -1 keeps the zygote's uid. Returns the child's pid in the zygote, 0 in
// the child (already reduced), or throws.
static napi_value Fork(napi_env env, napi_callback_info info) {
  if (is_child) return throw_error(env, "a forked sandbox may not fork");
  size_t argc = 1;
  napi_value argv[1];
  int32_t uid = -1;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok) return throw_error(env, "bad call");
  if (argc >= 1 && napi_get_value_int32(env, argv[0], &uid) != napi_ok) return throw_error(env, "uid: a number");
  keep_all_mappings();
  pid_t pid = fork();
  if (pid < 0) return throw_error(env, strerror(errno));
  if (pid == 0) {
    is_child = 1;
    // Any failure here ends the child before it runs anything: the coordinator sees
    // its pipes close and reports a sandbox that did not start.
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) _exit(120);
    if (getppid() == 1) _exit(120);
    if (uid >= 0) {
      if (setgroups(0, NULL) != 0) _exit(121);
      if (setresgid(uid, uid, uid) != 0) _exit(122);
      if (setresuid(uid, uid, uid) != 0) _exit(123);
    }
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) _exit(124);
    if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) _exit(125);
  }
  napi_value r;
  napi_create_int32(env, (int32_t)pid, &r);
  return r;
}

NAPI_MODULE_INIT() {
  // The zygote never waits for its children: the kernel reaps them.
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = SIG_IGN;
  sa.sa_flags = SA_NOCLDWAIT;
  sigaction(SIGCHLD, &sa, NULL);
  napi_value f;
  napi_create_function(env, "fork", NAPI_AUTO_LENGTH, Fork, NULL, &f);
  napi_set_named_property(env, exports, "fork", f);
  return exports;
}
