// nsrun ROOT BASE COUNT CMD...: runs CMD as root of a new user namespace whose uid
// and gid 0 is the host's ROOT, one of the host's BASE..BASE+COUNT-1 (a pool's block
// of sandbox uids, jail.mjs), and whose 1 + (h - BASE) is the host's h for every
// other h of the block; nothing else is mapped, so its root holds capabilities over
// that namespace alone, never the host's root. Run by the coordinator under root to start
// a fork server's zygote (fork_server.mjs), which may then give each forked sandbox
// a uid of its own from the block (forker.c). Bubblewrap cannot map a range.
// Exits as CMD does; CMD is killed when nsrun is.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

static int put(pid_t pid, const char *file, const char *text) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/%s", (int)pid, file);
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  int ok = write(fd, text, strlen(text)) == (ssize_t)strlen(text);
  close(fd);
  return ok;
}

int main(int argc, char **argv) {
  if (argc < 5) {
    fprintf(stderr, "usage: nsrun ROOT BASE COUNT CMD...\n");
    return 2;
  }
  long root = strtol(argv[1], NULL, 10);
  long base = strtol(argv[2], NULL, 10);
  long count = strtol(argv[3], NULL, 10);
  if (base < 65536 || count < 2 || count > 65536 || root < base || root >= base + count) {
    fprintf(stderr, "nsrun: BASE from 65536, COUNT 2 to 65536, ROOT among them\n");
    return 2;
  }
  int up[2], go[2];
  if (pipe2(up, O_CLOEXEC) || pipe2(go, O_CLOEXEC)) return 3;
  // What is orphaned below (bubblewrap's own init, which its outer process does not
  // wait for) is reaped here, not left to an init that may not reap. Before the
  // fork: only processes forked after it look for this reaper.
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  // Killed with what started it (the pool's spawner), as its child is with it.
  pid_t starter = getppid();
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != starter) return 3;
  pid_t pid = fork();
  if (pid < 0) return 3;
  if (pid == 0) {
    char c;
    if (unshare(CLONE_NEWUSER) != 0) {
      perror("nsrun: unshare");
      _exit(3);
    }
    if (write(up[1], "u", 1) != 1 || read(go[0], &c, 1) != 1 || c != 'g') _exit(3);
    if (setresgid(0, 0, 0) || setresuid(0, 0, 0)) {
      perror("nsrun: setresuid");
      _exit(3);
    }
    // After the uid: a change of uid clears the parent-death signal.
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() == 1) _exit(3);
    execvp(argv[4], argv + 4);
    perror("nsrun: exec");
    _exit(127);
  }
  char c;
  if (read(up[0], &c, 1) != 1) return 3;
  char map[256];
  long below = root - base, above = base + count - 1 - root;
  int n = snprintf(map, sizeof map, "0 %ld 1\n", root);
  if (below > 0) n += snprintf(map + n, sizeof map - n, "1 %ld %ld\n", base, below);
  if (above > 0) n += snprintf(map + n, sizeof map - n, "%ld %ld %ld\n", below + 2, root + 1, above);
  if (!put(pid, "uid_map", map) || !put(pid, "gid_map", map)) {
    perror("nsrun: uid_map");
    kill(pid, SIGKILL);
    return 3;
  }
  if (write(go[1], "g", 1) != 1) return 3;
  int status = 0;
  for (;;) {
    int st;
    pid_t done = wait(&st);
    if (done == pid) status = st;
    if (done < 0 && errno != EINTR) break;   /* ECHILD: nothing left */
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}
