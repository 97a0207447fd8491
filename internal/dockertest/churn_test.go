package dockertest

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"
)

// TestChurn: containers go through their whole life one after another
// (both kinds), and none of the churn's is left after it stops.
func TestChurn(t *testing.T) {
	cli := Engine(t)
	img := ChurnImage(t, cli)
	start := time.Now()
	ch := Churn(t, cli, img)
	ctx := context.Background()
	// Both kinds: the second container is one that is stopped.
	for deadline := time.Now().Add(2 * time.Minute); ch.Done() < 2 && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
	}
	n := ch.Stop()
	t.Logf("%d containers in %s", n, time.Since(start).Round(time.Millisecond))
	if n < 2 {
		t.Errorf("Stop says %d containers went through, want at least 2", n)
	}
	res, err := cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: client.Filters{}.Add("label", ChurnLabel)})
	if err != nil {
		t.Fatal(err)
	}
	// Another process's churn may run at the same time: this one's only.
	for _, c := range res.Items {
		if strings.HasPrefix(c.Labels[ChurnLabel], fmt.Sprintf("%d-", os.Getpid())) {
			t.Errorf("left after stop: %s (%s)", c.ID, c.State)
		}
	}
}
