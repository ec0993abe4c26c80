/* The helper header OpenPMIx's example programs include. Debian's libpmix-dev ships
 * the examples without it, so this declares what hello.c and client.c use: a one-shot
 * lock that a PMIx callback releases and the main thread waits on. Written here from
 * how the examples use it; the examples themselves are compiled unchanged. */
#ifndef BATON_PMIX_EXAMPLES_H
#define BATON_PMIX_EXAMPLES_H

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pmix_common.h>

#define EXAMPLES_HIDE_UNUSED_PARAMS(...) (void)(__VA_ARGS__)

typedef struct {
    pthread_mutex_t mutex;
    pthread_cond_t cond;
    volatile bool active; /* true until the callback released the waiter */
    pmix_status_t status;
    int count;
    size_t evhandler_ref;
} mylock_t;

#define DEBUG_CONSTRUCT_LOCK(l)                                                                    \
    do {                                                                                           \
        pthread_mutex_init(&(l)->mutex, NULL);                                                     \
        pthread_cond_init(&(l)->cond, NULL);                                                       \
        (l)->active = true;                                                                        \
        (l)->status = PMIX_SUCCESS;                                                                \
        (l)->count = 0;                                                                            \
        (l)->evhandler_ref = 0;                                                                    \
    } while (0)

#define DEBUG_DESTRUCT_LOCK(l)                                                                     \
    do {                                                                                           \
        pthread_mutex_destroy(&(l)->mutex);                                                        \
        pthread_cond_destroy(&(l)->cond);                                                          \
    } while (0)

#define DEBUG_WAIT_THREAD(l)                                                                       \
    do {                                                                                           \
        pthread_mutex_lock(&(l)->mutex);                                                           \
        while ((l)->active)                                                                        \
            pthread_cond_wait(&(l)->cond, &(l)->mutex);                                            \
        pthread_mutex_unlock(&(l)->mutex);                                                         \
    } while (0)

#define DEBUG_WAKEUP_THREAD(l)                                                                     \
    do {                                                                                           \
        pthread_mutex_lock(&(l)->mutex);                                                           \
        (l)->active = false;                                                                       \
        pthread_cond_broadcast(&(l)->cond);                                                        \
        pthread_mutex_unlock(&(l)->mutex);                                                         \
    } while (0)

/* A lock plus the namespace and exit code an event reports (client.c's debugger
 * release handler). */
typedef struct {
    mylock_t lock;
    char *nspace;
    int exit_code;
    bool exit_code_given;
} myrel_t;

#define DEBUG_CONSTRUCT_MYREL(r)                                                                   \
    do {                                                                                           \
        DEBUG_CONSTRUCT_LOCK(&(r)->lock);                                                          \
        (r)->nspace = NULL;                                                                        \
        (r)->exit_code = 0;                                                                        \
        (r)->exit_code_given = false;                                                              \
    } while (0)

#define DEBUG_DESTRUCT_MYREL(r)                                                                    \
    do {                                                                                           \
        DEBUG_DESTRUCT_LOCK(&(r)->lock);                                                           \
        free((r)->nspace);                                                                         \
    } while (0)

#endif
