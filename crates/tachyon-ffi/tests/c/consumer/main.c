/* A program built against an installed libtachyon, through pkg-config or
 * find_package(tachyon): it creates a region, sends and receives one
 * message, and removes the region. */
#include <stdio.h>
#include <string.h>
#include <tachyon/tachyon.h>
#include <unistd.h>

int main(void) {
    char name[64];
    snprintf(name, sizeof name, "c-consumer-%d", (int)getpid());
    ty_region_conf_t rc = ty_region_conf_default;
    rc.size = 8 << 20;
    rc.ring_arena = 1 << 20;
    ty_region_t* reg;
    ty_topic_t* topic;
    ty_msg_t m;
    if (ty_region_open(name, &rc, &reg) != TY_OK || ty_topic_create(reg, "t", NULL, &topic) != TY_OK ||
        ty_send(topic, "installed", 9, 1, 0) != TY_OK || ty_subscribe(topic, 0, &m, 0) != TY_OK) {
        fprintf(stderr, "consumer: %s\n", ty_last_error());
        return 1;
    }
    int ok = m.len == 9 && memcmp(m.data, "installed", 9) == 0;
    ty_release(topic, &m);
    ty_topic_close(topic);
    ty_region_close(reg);
    ty_region_remove(name);
    printf("libtachyon %s: %s\n", ty_version(), ok ? "works" : "BROKEN");
    return ok ? 0 : 1;
}
