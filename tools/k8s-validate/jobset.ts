// JobSet (jobset.x-k8s.io/v1alpha2) for the strict check: kubernetes-models
// has no model of it. Written by hand from the JobSet controller's Go types
// (api/jobset/v1alpha2/jobset_types.go) as of release v0.9.0, the oldest
// that labels pods with the JobSet's UID (deploy/k8s/jobset.yaml needs it);
// fields added later are refused. Each replicatedJobs[].template is
// Kubernetes' own batch/v1 JobTemplateSpec, checked by its real schema.
// Only the spec is described: status is the controller's.
import type { IJob } from "kubernetes-models/batch/v1/Job";
import type { IJobTemplateSpec } from "kubernetes-models/batch/v1/JobTemplateSpec";

export type IObjectMeta = NonNullable<IJob["metadata"]>;

export interface IJobSetDependsOn {
  name: string;
  status: "Ready" | "Complete";
}

export interface IJobSetReplicatedJob {
  name: string;
  groupName?: string;
  template: IJobTemplateSpec;
  replicas?: number;
  dependsOn?: IJobSetDependsOn[];
}

export interface IJobSetNetwork {
  enableDNSHostnames?: boolean;
  subdomain?: string;
  publishNotReadyAddresses?: boolean;
}

export interface IJobSetSuccessPolicy {
  operator: "All" | "Any";
  targetReplicatedJobs?: string[];
}

export interface IJobSetFailurePolicyRule {
  name: string;
  action: "FailJobSet" | "RestartJobSet" | "RestartJobSetAndIgnoreMaxRestarts";
  // The reasons JobSet's webhook accepts (a Job's Failed condition).
  onJobFailureReasons?: Array<
    "BackoffLimitExceeded" | "DeadlineExceeded" | "FailedIndexes" | "MaxFailedIndexesExceeded" | "PodFailurePolicy"
  >;
  targetReplicatedJobs?: string[];
}

export interface IJobSetFailurePolicy {
  maxRestarts?: number;
  restartStrategy?: "Recreate" | "BlockingRecreate";
  rules?: IJobSetFailurePolicyRule[];
}

export interface IJobSetStartupPolicy {
  startupPolicyOrder: "AnyOrder" | "InOrder";
}

export interface IJobSetCoordinator {
  replicatedJob: string;
  jobIndex?: number;
  podIndex?: number;
}

export interface IJobSetSpec {
  replicatedJobs?: IJobSetReplicatedJob[];
  network?: IJobSetNetwork;
  successPolicy?: IJobSetSuccessPolicy;
  failurePolicy?: IJobSetFailurePolicy;
  startupPolicy?: IJobSetStartupPolicy;
  suspend?: boolean;
  coordinator?: IJobSetCoordinator;
  managedBy?: string;
  ttlSecondsAfterFinished?: number;
}

export interface IJobSet {
  apiVersion: "jobset.x-k8s.io/v1alpha2";
  kind: "JobSet";
  metadata?: IObjectMeta;
  spec?: IJobSetSpec;
}
