/*
 * storage._fsync_worker: fdatasync and write jobs run on native threads that never take the GIL.
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
 * submit_write(token: int, fd: int, position: int, chunks: tuple[bytes-like, ...]) -> None
 *     Queues a write job: a worker writes the chunks one after the other from `position`
 *     with pwritev (short writes continued, EINTR retried), then closes fd and reports like
 *     an fsync job (errno of the first failure, or 0). The job holds a buffer of each chunk
 *     (the objects stay alive and unresized) until completed() reports it and releases them
 *     under the GIL. The worker owns fd once the call returns; on any exception it is left
 *     to the caller.
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
 * Hand-offs: the thread that submits and collects (the event loop, holding the GIL) never
 * takes a lock a worker holds, so a worker preempted at any point cannot make it wait (on a
 * busy host a worker preempted while holding a shared queue lock kept the event loop waiting
 * 100-300 ms). submit() pushes the job on the lock-free stack `inbox` and posts the
 * semaphore `jobs` (sem_post never blocks); a worker waits on `jobs`, then, under `wlock`
 * (taken by workers only), moves the whole inbox to its FIFO `head`/`tail` in submission
 * order and takes the first job. A finished job node itself is pushed on the lock-free
 * stack `done`, so a worker never allocates; it signals the eventfd only when it made that
 * stack non-empty, and completed() reads the eventfd before it takes the whole stack, so
 * every entry is either taken by that call or announced by a later signal. `started` and
 * `stopping` are written only by submit() and close(), which hold the GIL.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/uio.h>
#include <unistd.h>

typedef struct job {
    struct job *next;
    long long token;
    int err;
    long long position;   /* write jobs: where the first chunk goes */
    Py_ssize_t nbufs;     /* write jobs: chunks (0: an fsync job) */
    Py_buffer *bufs;      /* write jobs: held until completed() releases them under the GIL */
    struct iovec *iov;    /* write jobs: one per chunk, consumed by the write */
    Py_ssize_t nfds;
    int fds[];
} job_t;

/* Free a job; under the GIL when it holds buffers. */
static void free_job(job_t *job)
{
    for (Py_ssize_t i = 0; i < job->nbufs; i++)
        PyBuffer_Release(&job->bufs[i]);
    PyMem_RawFree(job->bufs);
    PyMem_RawFree(job->iov);
    free(job);
}

typedef struct {
    PyObject_HEAD
    job_t *inbox;         /* lock-free stack: submitted, not yet taken by a worker (newest first) */
    sem_t jobs;           /* one post per job, and one per thread at close() */
    pthread_mutex_t wlock;   /* workers only: guards head/tail */
    job_t *head, *tail;   /* taken from the inbox, in submission order, not yet started */
    job_t *done;          /* lock-free stack: finished, not yet collected (newest first) */
    int max_threads;
    int started;          /* GIL */
    int free_threads;     /* atomic: started threads not running a job, minus jobs queued */
    int stopping;         /* atomic; set under the GIL */
    int closed;           /* close() finished: threads joined */
    pthread_t *threads;
    int efd;
    int ready;            /* semaphore and mutex initialised */
} Worker;

static void push(job_t **stack, job_t *job, int *was_empty)
{
    job_t *top = __atomic_load_n(stack, __ATOMIC_RELAXED);
    do {
        job->next = top;
    } while (!__atomic_compare_exchange_n(stack, &top, job, 1, __ATOMIC_RELEASE, __ATOMIC_RELAXED));
    if (was_empty)
        *was_empty = top == NULL;
}

/* The whole stack, oldest first. */
static job_t *take_all(job_t **stack)
{
    job_t *newest = __atomic_exchange_n(stack, NULL, __ATOMIC_ACQUIRE), *oldest = NULL;
    while (newest != NULL) {
        job_t *next = newest->next;
        newest->next = oldest;
        oldest = newest;
        newest = next;
    }
    return oldest;
}

/* Every byte of the iovecs from `position`; 0 or the errno of the failure. */
static int write_all(int fd, struct iovec *iov, Py_ssize_t count, long long position)
{
    while (count > 0) {
        int batch = count > IOV_MAX ? IOV_MAX : (int)count;
        ssize_t n = pwritev(fd, iov, batch, (off_t)position);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return errno;
        }
        if (n == 0)
            return EIO;
        position += n;
        while (count > 0 && (size_t)n >= iov->iov_len) {
            n -= (ssize_t)iov->iov_len;
            iov++;
            count--;
        }
        if (count > 0 && n > 0) {
            iov->iov_base = (char *)iov->iov_base + n;
            iov->iov_len -= (size_t)n;
        }
    }
    return 0;
}

static int run_job(job_t *job)
{
    int err = 0;
    if (job->nbufs > 0)
        err = write_all(job->fds[0], job->iov, job->nbufs, job->position);
    for (Py_ssize_t i = 0; i < job->nfds && err == 0 && job->nbufs == 0; i++) {
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

static void report(Worker *w, job_t *job)
{
    uint64_t one = 1;
    int was_empty;
    push(&w->done, job, &was_empty);
    if (was_empty) {
        while (write(w->efd, &one, sizeof one) < 0 && errno == EINTR)
            ;
    }
}

/* The next job in submission order, or NULL (then the post was close()'s). */
static job_t *next_job(Worker *w)
{
    pthread_mutex_lock(&w->wlock);
    if (w->head == NULL) {
        w->head = take_all(&w->inbox);
        w->tail = w->head;
        while (w->tail != NULL && w->tail->next != NULL)
            w->tail = w->tail->next;
    }
    job_t *job = w->head;
    if (job != NULL) {
        w->head = job->next;
        if (w->head == NULL)
            w->tail = NULL;
    }
    pthread_mutex_unlock(&w->wlock);
    return job;
}

static void *work(void *arg)
{
    Worker *w = (Worker *)arg;
    for (;;) {
        while (sem_wait(&w->jobs) != 0 && errno == EINTR)
            ;
        job_t *job = next_job(w);
        if (job == NULL) {
            if (__atomic_load_n(&w->stopping, __ATOMIC_ACQUIRE))
                break;            /* stopping and nothing queued */
            continue;
        }
        job->err = run_job(job);
        /* Free before the report: a submit prompted by it finds this thread instead of starting one. */
        __atomic_add_fetch(&w->free_threads, 1, __ATOMIC_RELAXED);
        report(w, job);
    }
    return NULL;
}

/* Under the GIL. 0 on success. */
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
    if (sem_init(&w->jobs, 0, 0) != 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        Py_DECREF(w);
        return NULL;
    }
    pthread_mutex_init(&w->wlock, NULL);
    w->ready = 1;
    w->max_threads = threads;
    return (PyObject *)w;
}

static void stop_and_join(Worker *w)
{
    __atomic_store_n(&w->stopping, 1, __ATOMIC_RELEASE);
    int started = w->started;
    for (int i = 0; i < started; i++)
        sem_post(&w->jobs);       /* one wake-up per thread: each exits once nothing is queued */
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
        sem_destroy(&w->jobs);
        pthread_mutex_destroy(&w->wlock);
        for (job_t *job = take_all(&w->done); job != NULL;) {
            job_t *next = job->next;
            free_job(job);
            job = next;
        }
    }
    if (w->efd >= 0)
        close(w->efd);
    PyMem_RawFree(w->threads);
    Py_TYPE(w)->tp_free((PyObject *)w);
}

/* Queue `job` (under the GIL). 0, or -1 with an exception set and the job left to the caller. */
static int enqueue(Worker *w, job_t *job)
{
    if (w->stopping) {
        PyErr_SetString(PyExc_RuntimeError, "fsync worker is closed");
        return -1;
    }
    if (__atomic_load_n(&w->free_threads, __ATOMIC_RELAXED) <= 0 && w->started < w->max_threads) {
        if (start_thread(w) == 0) {
            w->started++;
            __atomic_add_fetch(&w->free_threads, 1, __ATOMIC_RELAXED);
        } else if (w->started == 0) {
            PyErr_SetString(PyExc_RuntimeError, "can't start an fsync thread");
            return -1;
        }   /* else: the running threads take the job */
    }
    __atomic_sub_fetch(&w->free_threads, 1, __ATOMIC_RELAXED);
    push(&w->inbox, job, NULL);
    sem_post(&w->jobs);
    return 0;
}

static job_t *new_job(long long token, Py_ssize_t nfds)
{
    job_t *job = malloc(sizeof(job_t) + (size_t)nfds * sizeof(int));
    if (job == NULL)
        return NULL;
    job->next = NULL;
    job->token = token;
    job->err = 0;
    job->position = 0;
    job->nbufs = 0;
    job->bufs = NULL;
    job->iov = NULL;
    job->nfds = nfds;
    return job;
}

static int fd_of(PyObject *obj, int *fd)
{
    int overflow;
    long value = PyLong_AsLongAndOverflow(obj, &overflow);
    if (value == -1 && PyErr_Occurred())
        return -1;
    if (overflow || value < 0 || value > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "a file descriptor must be a non-negative int");
        return -1;
    }
    *fd = (int)value;
    return 0;
}

static PyObject *Worker_submit(Worker *w, PyObject *args)
{
    long long token;
    PyObject *fds;
    if (!PyArg_ParseTuple(args, "LO!", &token, &PyTuple_Type, &fds))
        return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(fds);
    job_t *job = new_job(token, n);
    if (job == NULL)
        return PyErr_NoMemory();
    for (Py_ssize_t i = 0; i < n; i++) {
        if (fd_of(PyTuple_GET_ITEM(fds, i), &job->fds[i]) != 0) {
            free_job(job);
            return NULL;
        }
    }
    if (enqueue(w, job) != 0) {
        free_job(job);
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *Worker_submit_write(Worker *w, PyObject *args)
{
    long long token, position;
    PyObject *fd_obj, *chunks;
    if (!PyArg_ParseTuple(args, "LOLO!", &token, &fd_obj, &position, &PyTuple_Type, &chunks))
        return NULL;
    if (position < 0) {
        PyErr_SetString(PyExc_ValueError, "the position must not be negative");
        return NULL;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(chunks);
    if (n == 0) {
        PyErr_SetString(PyExc_ValueError, "a write needs at least one chunk");
        return NULL;
    }
    job_t *job = new_job(token, 1);
    if (job == NULL)
        return PyErr_NoMemory();
    if (fd_of(fd_obj, &job->fds[0]) != 0) {
        free_job(job);
        return NULL;
    }
    job->position = position;
    job->bufs = PyMem_RawCalloc((size_t)n, sizeof(Py_buffer));
    job->iov = PyMem_RawCalloc((size_t)n, sizeof(struct iovec));
    if (job->bufs == NULL || job->iov == NULL) {
        free_job(job);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (PyObject_GetBuffer(PyTuple_GET_ITEM(chunks, i), &job->bufs[i], PyBUF_SIMPLE) != 0) {
            free_job(job);
            return NULL;
        }
        job->nbufs = i + 1;
        job->iov[i].iov_base = job->bufs[i].buf;
        job->iov[i].iov_len = (size_t)job->bufs[i].len;
    }
    if (enqueue(w, job) != 0) {
        free_job(job);
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
        ;                         /* EAGAIN: nothing signalled, the stack may still hold entries */
    job_t *taken = take_all(&w->done);
    Py_ssize_t n = 0;
    for (job_t *job = taken; job != NULL; job = job->next)
        n++;
    PyObject *out = PyList_New(n);
    if (out == NULL) {            /* the entries go back; signal so a later call takes them */
        while (taken != NULL) {
            job_t *next = taken->next;
            push(&w->done, taken, NULL);
            taken = next;
        }
        (void)!write(w->efd, &one, sizeof one);
        return NULL;
    }
    Py_ssize_t i = 0;
    while (taken != NULL) {
        job_t *next = taken->next;
        PyObject *item = out == NULL ? NULL : Py_BuildValue("(Li)", taken->token, taken->err);
        if (item == NULL)
            Py_CLEAR(out);        /* these results are lost: only under MemoryError */
        else
            PyList_SET_ITEM(out, i++, item);
        free_job(taken);
        taken = next;
    }
    return out;
}

static PyObject *Worker_threads_started(Worker *w, void *Py_UNUSED(closure))
{
    return PyLong_FromLong(w->started);
}

static PyMethodDef Worker_methods[] = {
    {"submit", (PyCFunction)Worker_submit, METH_VARARGS,
     "submit(token, fds): queue an fdatasync-then-close job (the worker owns fds from now on)."},
    {"submit_write", (PyCFunction)Worker_submit_write, METH_VARARGS,
     "submit_write(token, fd, position, chunks): queue a pwritev-then-close job (the worker owns fd from now on)."},
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
