// Command kueue-raycluster-check runs Kueue's own RayCluster admission checks (the validating webhook's
// ValidateCreate and ValidateUpdate, at the version go.mod pins, default feature gates) on RayClusters read as a
// JSON array from stdin, without a cluster: each element is {"new": RayCluster} or {"old": RayCluster, "new":
// RayCluster}. It prints a JSON array of the same length: "" where Kueue admits, else Kueue's error message.
// The webhook runs as Kueue's default configuration has it: manageJobsWithoutQueueName off, no default LocalQueue.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"

	rayv1 "github.com/ray-project/kuberay/ray-operator/apis/ray/v1"
	"sigs.k8s.io/kueue/pkg/controller/jobs/raycluster"
)

type request struct {
	Old *rayv1.RayCluster `json:"old,omitempty"`
	New rayv1.RayCluster  `json:"new"`
}

func verdict(ctx context.Context, webhook *raycluster.RayClusterWebhook, r *request) string {
	var err error
	if r.Old == nil {
		_, err = webhook.ValidateCreate(ctx, &r.New)
	} else {
		_, err = webhook.ValidateUpdate(ctx, r.Old, &r.New)
	}
	if err != nil {
		return err.Error()
	}
	return ""
}

func main() {
	var requests []request
	if err := json.NewDecoder(os.Stdin).Decode(&requests); err != nil {
		fmt.Fprintln(os.Stderr, "reading the RayClusters:", err)
		os.Exit(2)
	}
	// The zero value is the default configuration; the queue manager is consulted only when an update removes
	// the queue label while manageJobsWithoutQueueName is on, which this configuration never reaches.
	webhook := &raycluster.RayClusterWebhook{}
	verdicts := make([]string, len(requests))
	for i := range requests {
		verdicts[i] = verdict(context.Background(), webhook, &requests[i])
	}
	if err := json.NewEncoder(os.Stdout).Encode(verdicts); err != nil {
		fmt.Fprintln(os.Stderr, "writing the verdicts:", err)
		os.Exit(2)
	}
}
