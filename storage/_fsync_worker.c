/*
 * storage._fsync_worker: fdatasync jobs run on native threads that never take the GIL.
 *
 * FsyncWorker(threads) owns a FIFO of jobs and up to `threads` worker pthreads (started
 * lazily: a thread is started only when no started thread is free, so a steady stream of
 * one job at a time keeps one warm thread), and an eventfd (Linux only; the module is not
 * built elsewhere and broker/flusher.py then uses its Python threads).
 *
 * submit(token: int, fds: tuple[int, ...]) -> None
 *     Queues a job and returns at once; the worker owns the descriptors from then on. A
 *     worker fdatasyncs each fd in order (EINTR retried, as os.fdatasync does), stops
 *     syncing at the first failure and remembers its errno, then closes every fd (also
 *     after a failure), appends (token, errno or 0) to the completed list and signals the
 *     eventfd. Raises RuntimeError (the descriptors NOT taken: the caller closes them)
 *     when the worker is closed or no thread could be started at all (MemoryError and the
 *     argument errors leave them to the caller too).
 * fileno() -> int
 *     The eventfd: readable while completions wait to be collected.
 * completed() -> list[tuple[int, int]]
 *     Clears the eventfd and returns (token, errno) of every job finished since the last
 *     call, in finishing order; each job is reported exactly once (a MemoryError while
 *     building the list loses the entries it had taken).
 * close() -> None
 *     Stops accepting jobs, lets the threads run every job still queued (so queued data is
 *     synced and no descriptor leaks; their results appear in completed()), and joins them.
 *     The eventfd stays open until the object is freed, so completed() still works.
 *
 * Locking: `qlock` + `qcond` guard the queue and the thread accounting; `clock` guards the
 * completed list (taken inside qlock by the workers, alone by completed() and submit()).
 * submit() grows the completed list to hold every job not yet collected, so a worker never
 * allocates. A worker signals the eventfd only when it makes the completed list non-empty:
 * completed() reads the eventfd before it takes the list, so every entry is either taken
 * by that call or announced by a later signal.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

typedef struct job {
    struct job *next;
    long long token;
    Py_ssize_t nfds;
    int fds[];
} job_t;

typedef struct {
    long long token;
    int err;
} done_t;

typedef struct {
    PyObject_HEAD
    pthread_mutex_t qlock;
    pthread_cond_t qcond;
    job_t *head, *tail;
    int max_threads;
    int started;
    int free_threads;     /* started threads not running a job, minus jobs queued */
    int stopping;
    int closed;           /* close() finished: threads joined */
    pthread_t *threads;
    pthread_mutex_t clock;
    done_t *done;
    Py_ssize_t ndone, cap_done;
    Py_ssize_t uncollected;   /* jobs queued, running or done but not yet returned by completed() */
    int efd;
    int ready;            /* mutexes/cond initialised */
} Worker;

static int run_job(job_t *job)
{
    int err = 0;
    for (Py_ssize_t i = 0; i < job->nfds && err == 0; i++) {
        while (fdatasync(job->fds[i]) != 0) {
            if (errno != EINTR) {
                err = errno;
                break;
            }
        }
    }
    for (Py_ssize_t i = 0; i < job->nfds; i++)
        close(job->fds[i]);   /* never retried: on Linux the fd is gone even on EINTR */
    return err;
}

/* With qlock held. Never allocates: submit() made room for every job not yet collected. */
static void report(Worker *w, long long token, int err)
{
    uint64_t one = 1;
    int signal_it;
    pthread_mutex_lock(&w->clock);
    signal_it = w->ndone == 0;
    w->done[w->ndone].token = token;
    w->done[w->ndone].err = err;
    w->ndone++;
    pthread_mutex_unlock(&w->clock);
    if (signal_it) {
        while (write(w->efd, &one, sizeof one) < 0 && errno == EINTR)
            ;
    }
}

static void *work(void *arg)
{
    Worker *w = (Worker *)arg;
    pthread_mutex_lock(&w->qlock);
    for (;;) {
        while (w->head == NULL && !w->stopping)
            pthread_cond_wait(&w->qcond, &w->qlock);
        job_t *job = w->head;
        if (job == NULL)
            break;                /* stopping and nothing queued */
        w->head = job->next;
        if (w->head == NULL)
            w->tail = NULL;
        pthread_mutex_unlock(&w->qlock);
        int err = run_job(job);
        pthread_mutex_lock(&w->qlock);
        /* Free before the report, which is made under qlock too (one lock round per job):
         * a submit prompted by this report finds this thread instead of starting one. */
        w->free_threads++;
        report(w, job->token, err);
        free(job);
    }
    pthread_mutex_unlock(&w->qlock);
    return NULL;
}

/* With qlock held. 0 on success. */
static int start_thread(Worker *w)
{
    sigset_t all, old;
    pthread_attr_t attr;
    int rc;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);   /* signals stay with the interpreter's threads */
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 256 * 1024);
    rc = pthread_create(&w->threads[w->started], &attr, work, w);
    pthread_attr_destroy(&attr);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
#ifdef __GLIBC__
    if (rc == 0) {
        char name[16];
        snprintf(name, sizeof name, "sundial-fsync_%d", w->started);
        pthread_setname_np(w->threads[w->started], name);
    }
#endif
    return rc;
}

static PyObject *Worker_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"threads", NULL};
    int threads;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "i", kwlist, &threads))
        return NULL;
    if (threads < 1 || threads > 1024) {
        PyErr_SetString(PyExc_ValueError, "threads must be between 1 and 1024");
        return NULL;
    }
    Worker *w = (Worker *)type->tp_alloc(type, 0);
    if (w == NULL)
        return NULL;
    w->efd = -1;
    w->threads = PyMem_RawCalloc((size_t)threads, sizeof(pthread_t));
    if (w->threads == NULL) {
        Py_DECREF(w);
        return PyErr_NoMemory();
    }
    w->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (w->efd < 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        Py_DECREF(w);
        return NULL;
    }
    pthread_mutex_init(&w->qlock, NULL);
    pthread_cond_init(&w->qcond, NULL);
    pthread_mutex_init(&w->clock, NULL);
    w->ready = 1;
    w->max_threads = threads;
    return (PyObject *)w;
}

static void stop_and_join(Worker *w)
{
    pthread_mutex_lock(&w->qlock);
    w->stopping = 1;
    int started = w->started;
    pthread_cond_broadcast(&w->qcond);
    pthread_mutex_unlock(&w->qlock);
    for (int i = 0; i < started; i++)
        pthread_join(w->threads[i], NULL);
}

static PyObject *Worker_close(Worker *w, PyObject *Py_UNUSED(ignored))
{
    if (!w->closed) {
        Py_BEGIN_ALLOW_THREADS
        stop_and_join(w);
        Py_END_ALLOW_THREADS
        w->closed = 1;
    }
    Py_RETURN_NONE;
}

static void Worker_dealloc(Worker *w)
{
    if (w->ready) {
        if (!w->closed)
            stop_and_join(w);     /* the threads never take the GIL: no deadlock */
        pthread_mutex_destroy(&w->qlock);
        pthread_cond_destroy(&w->qcond);
        pthread_mutex_destroy(&w->clock);
    }
    if (w->efd >= 0)
        close(w->efd);
    free(w->done);
    PyMem_RawFree(w->threads);
    Py_TYPE(w)->tp_free((PyObject *)w);
}

static PyObject *Worker_submit(Worker *w, PyObject *args)
{
    long long token;
    PyObject *fds;
    if (!PyArg_ParseTuple(args, "LO!", &token, &PyTuple_Type, &fds))
        return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(fds);
    job_t *job = malloc(sizeof(job_t) + (size_t)n * sizeof(int));
    if (job == NULL)
        return PyErr_NoMemory();
    job->next = NULL;
    job->token = token;
    job->nfds = n;
    for (Py_ssize_t i = 0; i < n; i++) {
        int overflow;
        long fd = PyLong_AsLongAndOverflow(PyTuple_GET_ITEM(fds, i), &overflow);
        if (fd == -1 && PyErr_Occurred()) {
            free(job);
            return NULL;
        }
        if (overflow || fd < 0 || fd > INT32_MAX) {
            free(job);
            PyErr_SetString(PyExc_ValueError, "a file descriptor must be a non-negative int");
            return NULL;
        }
        job->fds[i] = (int)fd;
    }
    /* Room in the completed list for this job, so a worker never allocates (nor fails to). */
    pthread_mutex_lock(&w->clock);
    if (w->cap_done < w->uncollected + 1) {
        Py_ssize_t cap = w->cap_done ? w->cap_done * 2 : 64;
        done_t *grown = realloc(w->done, (size_t)cap * sizeof(done_t));
        if (grown == NULL) {
            pthread_mutex_unlock(&w->clock);
            free(job);
            return PyErr_NoMemory();
        }
        w->done = grown;
        w->cap_done = cap;
    }
    w->uncollected++;
    pthread_mutex_unlock(&w->clock);
    const char *refused = NULL;
    pthread_mutex_lock(&w->qlock);
    if (w->stopping) {
        refused = "fsync worker is closed";
    } else {
        if (w->free_threads <= 0 && w->started < w->max_threads) {
            if (start_thread(w) == 0) {
                w->started++;
                w->free_threads++;
            } else if (w->started == 0) {
                refused = "can't start an fsync thread";
            }   /* else: the running threads take the job */
        }
        if (refused == NULL) {
            w->free_threads--;
            if (w->tail)
                w->tail->next = job;
            else
                w->head = job;
            w->tail = job;
            pthread_cond_signal(&w->qcond);
        }
    }
    pthread_mutex_unlock(&w->qlock);
    if (refused != NULL) {
        pthread_mutex_lock(&w->clock);
        w->uncollected--;
        pthread_mutex_unlock(&w->clock);
        free(job);
        PyErr_SetString(PyExc_RuntimeError, refused);
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *Worker_fileno(Worker *w, PyObject *Py_UNUSED(ignored))
{
    return PyLong_FromLong(w->efd);
}

static PyObject *Worker_completed(Worker *w, PyObject *Py_UNUSED(ignored))
{
    uint64_t count, one = 1;
    while (read(w->efd, &count, sizeof count) < 0 && errno == EINTR)
        ;                         /* EAGAIN: nothing signalled, the list may still hold entries */
    pthread_mutex_lock(&w->clock);
    Py_ssize_t n = w->ndone;
    done_t *taken = n ? malloc((size_t)n * sizeof(done_t)) : NULL;
    if (n && taken == NULL) {     /* the entries stay; signal again so a later call takes them */
        pthread_mutex_unlock(&w->clock);
        (void)!write(w->efd, &one, sizeof one);
        return PyErr_NoMemory();
    }
    if (n)
        memcpy(taken, w->done, (size_t)n * sizeof(done_t));
    w->ndone = 0;
    w->uncollected -= n;
    pthread_mutex_unlock(&w->clock);
    PyObject *out = PyList_New(n);
    for (Py_ssize_t i = 0; out != NULL && i < n; i++) {
        PyObject *item = Py_BuildValue("(Li)", taken[i].token, taken[i].err);
        if (item == NULL)
            Py_CLEAR(out);        /* these results are lost: only under MemoryError */
        else
            PyList_SET_ITEM(out, i, item);
    }
    free(taken);
    return out;
}

static PyObject *Worker_threads_started(Worker *w, void *Py_UNUSED(closure))
{
    pthread_mutex_lock(&w->qlock);
    int started = w->started;
    pthread_mutex_unlock(&w->qlock);
    return PyLong_FromLong(started);
}

static PyMethodDef Worker_methods[] = {
    {"submit", (PyCFunction)Worker_submit, METH_VARARGS,
     "submit(token, fds): queue an fdatasync-then-close job (the worker owns fds from now on)."},
    {"fileno", (PyCFunction)Worker_fileno, METH_NOARGS, "The eventfd, readable while completions wait."},
    {"completed", (PyCFunction)Worker_completed, METH_NOARGS,
     "Clear the eventfd; (token, errno or 0) of every job finished since the last call."},
    {"close", (PyCFunction)Worker_close, METH_NOARGS,
     "Run every queued job, then stop and join the threads."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Worker_getset[] = {
    {"threads_started", (getter)Worker_threads_started, NULL, "Worker threads started so far.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject WorkerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "sundial.storage._fsync_worker.FsyncWorker",
    .tp_basicsize = sizeof(Worker),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "FsyncWorker(threads): fdatasync-and-close jobs on native threads (see module doc).",
    .tp_new = Worker_new,
    .tp_dealloc = (destructor)Worker_dealloc,
    .tp_methods = Worker_methods,
    .tp_getset = Worker_getset,
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_fsync_worker",
    .m_doc = "fdatasync jobs on native threads that never take the GIL (storage/_fsync_worker.c).",
    .m_size = -1,
};

PyMODINIT_FUNC PyInit__fsync_worker(void)
{
    if (PyType_Ready(&WorkerType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&moduledef);
    if (m == NULL)
        return NULL;
    Py_INCREF(&WorkerType);
    if (PyModule_AddObject(m, "FsyncWorker", (PyObject *)&WorkerType) < 0) {
        Py_DECREF(&WorkerType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
