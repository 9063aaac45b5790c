// The fork server's native call (issue 39, item 3; fork_server.mjs, sandbox.mjs
// --zygote). A sandbox restored once (the zygote) forks a fresh process per
// submission instead of a new Node starting and restoring Pyodide (measured in the
// jail: about 250 ms of CPU to a loaded lab-1 file, against under 10 forked).
//
// Node offers no fork. A forked Node keeps only the forking thread, so the zygote
// runs with --single-threaded and --liftoff-only (V8 then posts no work to helper
// threads the child would not have), and V8 marks its heap MADV_DONTFORK (the child
// would fault on its first object): undone here before each fork.
//
// The child drops what the zygote holds before it returns to JavaScript, so before
// any learner code: its FIFO pair on fds 3 and 4 (opened by the zygote, whose uid
// owns them), /dev/null on 0, 1 and 2; its own uid and gid when the zygote may set
// them (the zygote is root of a user namespace mapping its block of sandbox uids,
// nsrun.c; the kernel clears the capabilities with the uid), no supplementary
// groups, no new privileges, not dumpable (no process of its uid reads its memory or
// traces it), killed with the zygote; and it may fork no further. Any step that
// fails ends the child before JavaScript runs: its pipes close, and the pool reports
// a sandbox that did not start.
#define _GNU_SOURCE
#include <node_api.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#define SANDBOX_IN_FD 3   /* frames.mjs */
#define SANDBOX_OUT_FD 4

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

static napi_value fail(napi_env env, const char *what) {
  napi_throw_error(env, NULL, what);
  return NULL;
}

static int get_string(napi_env env, napi_value v, char *out, size_t cap) {
  size_t n = 0;
  if (napi_get_value_string_utf8(env, v, out, cap, &n) != napi_ok) return 0;
  return n > 0 && n < cap - 1;
}

// fork(uid, down, up, cpuS): uid -1 keeps the zygote's; cpuS, the child's RLIMIT_CPU
// (the zygote itself has none: it lives for many children). Returns the child's pid
// in the zygote, 0 in the child (already reduced), or throws (nothing forked).
static napi_value Fork(napi_env env, napi_callback_info info) {
  if (is_child) return fail(env, "a forked sandbox may not fork");
  size_t argc = 4;
  napi_value argv[4];
  int32_t uid = -1, cpu_s = 0;
  char down[4096], up[4096];
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc != 4) return fail(env, "fork(uid, down, up, cpuS)");
  if (napi_get_value_int32(env, argv[3], &cpu_s) != napi_ok || cpu_s < 1) return fail(env, "cpuS: a whole number of seconds");
  if (napi_get_value_int32(env, argv[0], &uid) != napi_ok || uid < -1) return fail(env, "uid: -1 or a uid");
  if (!get_string(env, argv[1], down, sizeof down) || !get_string(env, argv[2], up, sizeof up)) return fail(env, "down, up: paths");
  // Children that ended since the last fork: reaped now, so that until then a dead
  // child stays a zombie and its pid is nobody else's (the pool may still signal it).
  while (waitpid(-1, NULL, WNOHANG) > 0) {}
  // The coordinator holds the other ends already: neither open waits.
  int in = open(down, O_RDONLY | O_CLOEXEC);
  if (in < 0) return fail(env, strerror(errno));
  int out = open(up, O_WRONLY | O_CLOEXEC);
  if (out < 0) {
    close(in);
    return fail(env, strerror(errno));
  }
  keep_all_mappings();
  pid_t zygote = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    close(in);
    close(out);
    return fail(env, strerror(errno));
  }
  if (pid == 0) {
    is_child = 1;
    int null = open("/dev/null", O_RDWR);
    if (null < 0 || dup2(null, 0) < 0 || dup2(null, 1) < 0 || dup2(null, 2) < 0) _exit(121);
    if (null > 2) close(null);
    // dup2 onto 3 and 4 closes the zygote's own pipes there.
    if (dup2(in, SANDBOX_IN_FD) < 0 || dup2(out, SANDBOX_OUT_FD) < 0) _exit(122);
    close(in);
    close(out);
    struct rlimit cpu = { (rlim_t)cpu_s, (rlim_t)cpu_s };
    if (setrlimit(RLIMIT_CPU, &cpu) != 0) _exit(128);
    if (uid >= 0) {
      if (setgroups(0, NULL) != 0) _exit(123);
      if (setresgid(uid, uid, uid) != 0) _exit(124);
      if (setresuid(uid, uid, uid) != 0) _exit(125);
    }
    // After the uid: a change of uid clears the parent-death signal.
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != zygote) _exit(120);
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) _exit(126);
    if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) _exit(127);
  } else {
    close(in);
    close(out);
  }
  napi_value r;
  napi_create_int32(env, (int32_t)pid, &r);
  return r;
}

NAPI_MODULE_INIT() {
  // The zygote itself: no process of the sandboxes' uids, nor of its own, reads its
  // memory or traces it.
  prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
  napi_value f;
  napi_create_function(env, "fork", NAPI_AUTO_LENGTH, Fork, NULL, &f);
  napi_set_named_property(env, exports, "fork", f);
  return exports;
}
